"""A Runtime built from fake models, for CLI and chat tests that need no real GGUF file."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.backend.base import Message, RuntimeInfo
from specchat.backend.local import Runtime
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


def fake_runtime(target: FakeModel | None = None, draft: FakeModel | None = None) -> Runtime:
    target = target or fake_model()
    return Runtime(target=target, draft=draft, chat_tokens=chat_encode, raw_tokens=encode,
                   info=RuntimeInfo(target_name="fake", target_path="/fake.gguf",
                                    draft_name="fake-draft" if draft else None,
                                    template_note="fake template"))
