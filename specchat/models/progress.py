"""Progress of a mirror download, on stderr: a live rich bar in a terminal, plain lines if not.

stdout is reserved for answers, and a live bar written into a log file or a pipe is noise, so
a non-terminal stderr gets one line per part instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

# File names come from the hub and may carry terminal escapes. How text is made safe for a
# terminal is decided above this layer (term/safe.py): the CLI puts its function here at start.
# Until then (a library caller) text is written as it is.
shown: Callable[[str], str] = str


class Reporter(Protocol):
    """What the downloader tells the user; implementations decide how (or whether) to show it."""

    def start(self, label: str, total: int) -> None: ...
    def part(self, index: int, count: int, name: str) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def close(self) -> None: ...


class QuietReporter:
    def start(self, label: str, total: int) -> None:
        pass

    def part(self, index: int, count: int, name: str) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def close(self) -> None:
        pass


class LineReporter:
    """One line per part: readable in CI logs, no carriage-return soup."""

    def __init__(self) -> None:
        self._label = ""

    def start(self, label: str, total: int) -> None:
        self._label = label
        print(shown(f"specchat: {label}"), file=sys.stderr, flush=True)

    def part(self, index: int, count: int, name: str) -> None:
        print(shown(f"specchat:   part {index}/{count}: {name}"), file=sys.stderr, flush=True)

    def advance(self, nbytes: int) -> None:
        pass

    def close(self) -> None:
        pass


class RichReporter:
    """Bytes assembled out of the total, with the part currently being fetched in the label."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        self._task: TaskID | None = None
        self._label = ""

    def start(self, label: str, total: int) -> None:
        self._label = label
        self._progress.start()
        self._task = self._progress.add_task(escape(shown(label)), total=total)

    def part(self, index: int, count: int, name: str) -> None:
        if self._task is not None:
            text = f"{self._label} part {index}/{count}: {name}"
            self._progress.update(self._task, description=escape(shown(text)))

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, nbytes)

    def close(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=escape(shown(self._label)))
        self._progress.stop()


def make_reporter(quiet: bool) -> Reporter:
    if quiet:
        return QuietReporter()
    if sys.stderr.isatty():
        return RichReporter()
    return LineReporter()


def human_size(size: int) -> str:
    """1117320768 -> '1.1 GB' (decimal units, as download tools and disks report them)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"  # unreachable; keeps type checkers content


def say(quiet: bool, message: str) -> None:
    """One note about a download on stderr (never stdout: it carries answers and paths)."""
    if not quiet:
        print(shown(f"specchat: {message}"), file=sys.stderr, flush=True)
