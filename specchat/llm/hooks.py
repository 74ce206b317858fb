"""What llama.cpp calls back into: its log lines and, during long batches, the abort check.

Pure Python (no llama_cpp import): lib.py installs these objects as the library's callbacks.
"""

from __future__ import annotations

# The signal module's C half. Every eval arms and disarms SIGINT; signal.signal and getsignal
# wrap their results in enums, which for a function handler raises and catches a ValueError
# inside: ~10x the call itself, ~80 us a step just after llama_decode (cold caches).
import _signal  # type: ignore[import-not-found]
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# llama.cpp's verbose log quotes the model file's metadata (names, templates). How text is
# made safe for a terminal is decided above this layer (term/safe.py): the CLI puts its
# function here at start, so a hostile file's escapes are shown, not obeyed.
shown: Callable[[str], str] = str


class LogSink:
    """Where llama.cpp's C log lines go (installed with llama_log_set by the backend).

    Keeps the last error lines for one-line error messages and prints only when verbose.
    """

    ERROR, CONT = 4, 5  # enum ggml_log_level (ggml.h)

    def __init__(self) -> None:
        self.verbose = False
        self.errors: deque[str] = deque(maxlen=16)
        self.interrupted = False
        self._level = 0

    def __call__(self, level: int, text: bytes | None, _user_data: object) -> None:
        try:
            message = (text or b"").decode("utf-8", errors="replace")
            self._level = level = self._level if level == self.CONT else level
            if level == self.ERROR:
                self.errors.append(message)
            if self.verbose:
                sys.stderr.write(shown(message))
        except KeyboardInterrupt:
            # Ctrl-C while C code calls back into Python: ctypes would print and swallow it.
            # Keep it until the C call returns (raise_pending_interrupt).
            self.interrupted = True

    def raise_pending_interrupt(self) -> None:
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt


class AbortFlag:
    """llama.cpp's abort callback, answering True once Ctrl-C arrived during a long batch.

    Python runs a SIGINT handler only when the main thread executes bytecode, which during
    llama_decode happens in this callback (llama.cpp calls it between graph nodes on the
    calling thread). A raising handler would raise inside the callback, where ctypes swallows
    it; so `armed()` swaps in a handler that only sets the flag, and the backend raises
    KeyboardInterrupt itself once the C call has returned.
    """

    def __init__(self) -> None:
        self.interrupted = False

    def __call__(self, _user_data: object) -> bool:
        return self.interrupted

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.interrupted = True

    @contextmanager
    def armed(self) -> Iterator[bool]:
        """Catch SIGINT into the flag for the duration; yields False where it cannot (not
        the main thread, or someone else's SIGINT handler is installed)."""
        if (threading.current_thread() is not threading.main_thread()
                or _signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            yield False
            return
        self.interrupted = False
        _signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield True
        finally:
            _signal.signal(signal.SIGINT, signal.default_int_handler)

    def raise_pending_interrupt(self) -> None:
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt
