"""Fake parts for the chat tests: a readable fake model and a tokenizer that round-trips.

The tokenizer maps each character to one token and the fake model only emits those
characters, so re-rendering the history gives back exactly the tokens that were generated:
the condition under which a second turn can reuse the whole cached prefix.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from specchat.backend.base import Backend, Message
from specchat.backend.local import Runtime
from specchat.chat.chatlog import ChatLog
from specchat.chat.render import RenderConfig, Renderer
from specchat.chat.session import ChatSession
from specchat.engine.options import GenerationOptions, SamplingOptions
from tests.support.fake_runtime import fake_runtime
from tests.support.fakes import FakeModel

CHARS = "abcdefghijklmnopqrstuvwxyz .,\n"
ROLES = {"system": len(CHARS), "user": len(CHARS) + 1, "assistant": len(CHARS) + 2}
END = len(CHARS) + 3  # end of a message, and the end-of-generation token
N_VOCAB = END + 1
PIECES = [c.encode() for c in CHARS] + [b"", b"", b"", b""]


class ChatModel(FakeModel):
    """Never emits role tokens; ends a message now and then; can raise Ctrl-C on cue.

    Its logits are its own pure function of (seed, last two tokens), independent of how
    FakeModel computes its default ones.
    """

    def __init__(self, seed: int = 0, n_ctx: int = 4096, **kw: object) -> None:
        super().__init__(N_VOCAB, seed=seed, order=2, n_ctx=n_ctx, eog=(END,),
                         pieces=PIECES, logits_fn=_chat_logits(seed),
                         **kw)  # type: ignore[arg-type]
        self.interrupt_after_calls: int | None = None

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        if self.interrupt_after_calls is not None:
            if self.interrupt_after_calls <= 0:
                self.interrupt_after_calls = None
                raise KeyboardInterrupt  # before touching the cache, as a signal would
            self.interrupt_after_calls -= 1
        return super().eval(tokens, logit_rows)


def _chat_logits(seed: int) -> Callable[[Sequence[int]], np.ndarray]:
    memo: dict[tuple[int, ...], np.ndarray] = {}

    def logits(context: Sequence[int]) -> np.ndarray:
        tail = tuple(int(t) for t in context[-2:])
        tail = (N_VOCAB,) * (2 - len(tail)) + tail
        if tail not in memo:
            row = np.random.default_rng([seed, *tail]).standard_normal(N_VOCAB) * 2.0
            row[list(ROLES.values())] = -1e9
            row[END] -= 3.0  # answers of a few dozen tokens, not one
            memo[tail] = row.astype(np.float32)
        return memo[tail]

    return logits


def encode(text: str) -> list[int]:
    return [CHARS.index(c) if c in CHARS else CHARS.index(".") for c in text.lower()]


def chat_tokens(messages: Sequence[Message]) -> list[int]:
    out: list[int] = []
    for m in messages:
        out += [ROLES[m["role"]], *encode(m["content"]), END]
    return out + [ROLES["assistant"]]


def runtime(target: FakeModel | None = None, draft: FakeModel | None = None) -> Runtime:
    """A runtime of the chat model (a target of its own is a ChatModel too) and its tokenizer."""
    return fake_runtime(target or ChatModel(), draft, chat_tokens=chat_tokens, raw_tokens=encode)


def options(**kw: object) -> GenerationOptions:
    return GenerationOptions(sampling=SamplingOptions(), max_tokens=40, spec="off").with_values(
        **kw)


class Streams:
    def __init__(self) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()

    def take(self) -> tuple[str, str]:
        out, err = self.out.getvalue(), self.err.getvalue()
        self.out.seek(0), self.out.truncate()
        self.err.seek(0), self.err.truncate()
        return out, err


def session(tmp: Path, rt: Backend | None = None, streams: Streams | None = None,
            **opts: object) -> tuple[ChatSession, Streams]:
    streams = streams or Streams()
    config = RenderConfig(rich=False, markdown=False, show_draft=False, summary=True)
    rt = rt or runtime()
    renderer = Renderer(config, streams.out, streams.err, draft_name=rt.info.draft_name,
                        token_bytes=rt.token_bytes)
    chat = ChatSession(runtime=rt, options=options(**opts), renderer=renderer,
                       chatlog=ChatLog(tmp / "conv.jsonl", meta={"model": "fake"}))
    return chat, streams
