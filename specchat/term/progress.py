"""The prefill progress line on stderr, for one-shot commands in a terminal.

The engine reports Progress after every prefill chunk; this draws one line that rewrites
itself, but only once the prefill has taken more than a second (a short prompt shows
nothing) and only when stderr is a terminal (a pipe or a log file gets no carriage-return
litter). `clear()` erases it before the answer or an error is printed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from specchat.engine.events import Progress

SHOW_AFTER_SECONDS = 1.0


class PrefillProgress:
    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None,
                 after: float = SHOW_AFTER_SECONDS) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.after = after
        self.shown = False

    def __call__(self, progress: Progress) -> None:
        if not self.enabled or progress.seconds < self.after:
            return
        self.stream.write("\r\x1b[K" + progress_text(progress))
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def progress_text(progress: Progress) -> str:
    """'specchat: reading the prompt 1024/3092 tokens (33%, 77 tok/s)'."""
    share = progress.done / progress.total if progress.total else 1.0
    rate = progress.done / progress.seconds if progress.seconds > 0 else 0.0
    return (f"specchat: reading the prompt {progress.done}/{progress.total} tokens "
            f"({share:.0%}, {rate:.0f} tok/s)")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
