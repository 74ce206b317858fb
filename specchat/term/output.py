"""stdout, the answer's only channel: writing to it, and what to do when it goes away.

Everything a command prints as its result goes through write(): on a terminal its control
characters are shown instead of obeyed (term/safe.py), to a pipe or file it stays exact.

A reader that stops reading (`specchat ... | head -c 10`) is not an error of ours: specchat
ends quietly with exit 0, as `cat` and `grep` do when their reader is gone. A full disk or a
broken device is: one line on stderr, exit 1. Either way the bytes still buffered for stdout
are dropped, so the interpreter's last flush cannot print a traceback on the way out.
"""

from __future__ import annotations

import os
import sys

from specchat.errors import SpecchatError
from specchat.fileio import describe
from specchat.term.safe import for_stream


class OutputClosed(Exception):  # a situation, not a failure: no Error suffix
    """The reader of stdout went away. Not an OSError, so click does not turn it into exit 1."""


class OutputError(SpecchatError):
    """stdout refused the answer (a full disk, an I/O error); the message says why."""


def write(text: str) -> None:
    """Write `text` to stdout at once; a closed pipe is OutputClosed, a failure one line.

    On a terminal its control characters are shown, not obeyed (term/safe.py); to a pipe or
    a file it goes exactly as given.
    """
    try:
        sys.stdout.write(for_stream(text, sys.stdout))
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputClosed from None
    except OSError as exc:
        raise OutputError(f"cannot write the answer to stdout: {describe(exc)}") from None


def line(text: str = "") -> None:
    """One line of a command's output (a table row, a path) to stdout, as write() does."""
    write(text + "\n")


def settle() -> None:
    """Flush stdout; if it cannot take the rest any more, drop the rest instead."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # ValueError: it was already closed
        drop()


def drop() -> None:
    """Point fd 1 at /dev/null so nothing left in stdout's buffer can fail later."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a real file (a test's capture): nothing will flush it at exit


def open_stdin_if_closed() -> None:
    """`specchat ... <&-` starts with no stdin at all: treat it as empty input."""
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as we do
