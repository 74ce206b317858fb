"""Signals that end a chat: SIGTERM (a kill, a shutdown) and SIGHUP (the terminal closed).

Ctrl-C stops an answer and keeps what was said; these two used to end the process at once,
losing the question and the partial answer. While a chat runs they are turned into the same
path as Ctrl-C (the answer stops, the turn is saved marked interrupted), and then the chat
leaves with 128 + the signal's number, as a shell reports it. A SIGHUP that was ignored when
specchat started (`nohup specchat chat`) stays ignored.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from specchat.llm.hooks import AbortFlag

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Ended(Exception):  # a situation, not a failure: no Error suffix
    """A signal ended the chat after its turn was saved; leave with `code`."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _State:
    signum: int | None = None
    holding: bool = False  # a turn is being written: record the signal, raise nothing


STATE = _State()


def code() -> int | None:
    """The exit code when a signal has ended the chat, else None."""
    return None if STATE.signum is None else 128 + STATE.signum


def leave_if_ended() -> None:
    """Raise Ended once a signal asked the chat to end."""
    exit_code = code()
    if exit_code is not None:
        raise Ended(exit_code)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    STATE.signum = signum
    if STATE.holding:
        return  # the write finishes; the caller leaves right after it (leave_if_ended)
    current = signal.getsignal(signal.SIGINT)
    if isinstance(getattr(current, "__self__", None), AbortFlag) and callable(current):
        # A long llama.cpp batch is running with Ctrl-C armed to abort it: abort it the same
        # way (raising here, inside llama.cpp's callback, would be swallowed by ctypes).
        current(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """SIGTERM and SIGHUP end the chat through the Ctrl-C path while inside."""
    STATE.signum = None
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def held() -> Iterator[None]:
    """Delay these signals (and Ctrl-C) while a turn is written, so the write is whole; one
    that arrived just before is only recorded."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {*SIGNALS, signal.SIGINT})
    STATE.holding = True
    try:
        yield
    finally:
        STATE.holding = False
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
