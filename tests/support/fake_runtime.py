"""A Runtime built from fake models, for CLI and chat tests that need no real GGUF file."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specchat.backend.base import Message, RuntimeInfo
from specchat.backend.local import Runtime
from specchat.engine.build import generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from tests.support.fakes import FakeModel

WORDS = [f"w{i} " for i in range(30)] + ["é", "<eos>"]
EOS = len(WORDS) - 1


def fake_model(seed: int = 0, **kw: object) -> FakeModel:
    return FakeModel(n_vocab=len(WORDS), seed=seed, order=2, eog=(EOS,),
                     pieces=[w.encode() for w in WORDS], **kw)  # type: ignore[arg-type]


def encode(text: str) -> list[int]:
    """A toy tokenizer: one token per character, never the end token."""
    return [ord(ch) % (EOS - 1) for ch in text]


def chat_encode(messages: Sequence[Message]) -> list[int]:
    text = "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)
    return encode(text + "<assistant>")


def fake_runtime(target: FakeModel | None = None, draft: FakeModel | None = None, *,
                 chat_tokens: Callable[[Sequence[Message]], list[int]] = chat_encode,
                 raw_tokens: Callable[[str], list[int]] = encode,
                 name: str = "fake") -> Runtime:
    """The one way tests build a local Runtime on fake models; a fake's own tokenizer (the
    chat model's, the scripted model's) comes in through chat_tokens and raw_tokens."""
    return Runtime(target=target or fake_model(), draft=draft, chat_tokens=chat_tokens,
                   raw_tokens=raw_tokens,
                   info=RuntimeInfo(target_name=name, target_path=f"/models/{name}.gguf",
                                    draft_name="fake-draft" if draft else None,
                                    draft_path="/models/draft.gguf" if draft else None,
                                    template_note="chatml-like fake template"))


def plain_answer(prompt: str, n: int, **sampling: Any) -> Finished:
    """What the fake model answers to a one-message chat, `n` tokens of plain decoding."""
    options = GenerationOptions(sampling=SamplingOptions(**sampling), max_tokens=n, spec="off")
    events = list(generate(fake_model(), chat_encode([{"role": "user", "content": prompt}]),
                           options))
    assert isinstance(events[-1], Finished)
    return events[-1]
