"""Hostile bytes for the terminal tests: a model that answers a scripted text (escape
sequences included) and a local OpenAI-compatible endpoint that does the same. The terminal
that would obey them is tests/support/tmux.py's Terminal."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from specchat.backend.base import Message
from specchat.backend.local import Runtime
from tests.support.fake_runtime import fake_runtime
from tests.support.fakeendpoint import FakeEndpoint, serve
from tests.support.fakes import FakeModel

# Writes "pwned" to the clipboard (OSC 52), renames the window (OSC 2), clears the screen.
CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"
TITLE = "\x1b]2;pwned-title\x07"
CLEAR = "\x1b[2J\x1b[H"
HOSTILE = f"before {CLIPBOARD}{TITLE}{CLEAR} after"
SHOWN = "before ^[]52;c;cHduZWQ=^G^[]2;pwned-title^G^[[2J^[[H after"

# --- a model that says what it is told ------------------------------------------------------
SYSTEM, USER, ASSISTANT, END = 256, 257, 258, 259
ROLES = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}


class ScriptedModel(FakeModel):
    """Byte tokens; after the last assistant role token it emits `script`, then END."""

    def __init__(self, script: str, n_ctx: int = 4096) -> None:
        self.script = list(script.encode())
        super().__init__(END + 1, n_ctx=n_ctx, eog=(END,),
                         pieces=[bytes([i]) for i in range(256)] + [b""] * 4,
                         logits_fn=self._next)

    def _next(self, context: Sequence[int]) -> np.ndarray:
        tokens = list(context)
        start = len(tokens) - tokens[::-1].index(ASSISTANT) if ASSISTANT in tokens else 0
        said = len(tokens) - start
        row = np.full(END + 1, -30.0, dtype=np.float32)
        row[self.script[said] if said < len(self.script) else END] = 30.0
        return row


def encode(text: str) -> list[int]:
    return list(text.encode())


def chat_tokens(messages: Sequence[Message]) -> list[int]:
    out: list[int] = []
    for m in messages:
        out += [ROLES[m["role"]], *encode(m["content"]), END]
    return out + [ASSISTANT]


def scripted_runtime(script: str) -> Runtime:
    return fake_runtime(ScriptedModel(script), chat_tokens=chat_tokens, raw_tokens=encode,
                        name="scripted")


# --- an endpoint that says it ---------------------------------------------------------------
@contextmanager
def endpoint() -> Iterator[str]:
    """A local server answering every chat request with HOSTILE (a 400 with it when the
    request mentions "fail"); yields its /v1 URL."""
    with serve(FakeEndpoint(words=[HOSTILE], refuse="fail")) as ep:
        yield ep.url + "/v1"
