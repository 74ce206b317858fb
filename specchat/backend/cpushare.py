"""How many specchat processes are decoding on this machine, so each takes its share of cores.

Two processes that each run llama.cpp with every core collapse: its threads meet at a spinning
barrier after every operation, and a thread that loses its core leaves the others spinning
(steps 20-50x slower, docs/performance.md). The thread governor (backend/threads.py) finds that
out from step times, but only after a slow step or two, and again at each probe. Processes of
our own can simply say that they are decoding: each holds an exclusive lock on one slot file
while an answer runs, and counts the slots others hold. The kernel drops the lock of a process
that dies, so nothing goes stale. Everything here is best effort: a directory that cannot be
used means no sharing, never a failed answer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from specchat.fileio import FileIOError, locked, make_dirs
from specchat.fileread import open_regular
from specchat.llm.ggml import default_threads
from specchat.paths import cpu_share_dir

SLOTS = 32  # processes counted at most; more than this many decoding at once is not a plan


class CpuShare:
    """Slot files in one directory; `threads()` is this process's share while it decodes."""

    def __init__(self, directory: Path | None = None, cores: int | None = None) -> None:
        self.directory = directory or cpu_share_dir()
        self.cores = cores or default_threads()
        self._held: tuple[int, contextlib.ExitStack] | None = None  # while an answer runs
        self.broken = False

    def active(self) -> int:
        """Specchat processes decoding now, this one included when it holds a slot."""
        own = self._name(self._held[0]) if self._held else None
        count = 0 if own is None else 1
        # Asked every few decode steps: only the slot files that exist are tried (one
        # directory read), not all SLOTS paths, most of which were never created.
        for name in self._slot_files():
            if name != own and self._taken(name):
                count += 1
        return count

    def threads(self, wanted: int) -> int:
        """At most `wanted`, and no more than an even split of the cores among the
        specchat processes decoding now, this one counted whether or not it holds a slot."""
        if self.broken:
            return wanted
        processes = self.active() + (0 if self._held else 1)
        return max(1, min(wanted, self.cores // processes))

    def acquire(self) -> None:
        if self.broken or self._held is not None:
            return
        try:
            make_dirs(self.directory)
        except FileIOError:
            self.broken = True
            return
        for slot in range(SLOTS):
            hold = contextlib.ExitStack()
            try:
                if hold.enter_context(locked(self._path(slot), wait=False)):
                    self._held = (slot, hold)
                    return
            except FileIOError:
                pass  # a FIFO or a link under a slot's name is no slot: try the next one
            hold.close()

    def release(self) -> None:
        if self._held is None:
            return
        _, hold = self._held
        self._held = None
        with contextlib.suppress(OSError):
            hold.close()  # closing the file drops the lock

    def _slot_files(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []  # no directory yet: nobody has used a slot
        return [n for n in names if n in _SLOT_NAMES]

    def _taken(self, name: str) -> bool:
        """Whether another process holds this slot file (a lock we can take is released at
        once)."""
        try:
            # A FIFO under a slot's name is refused, not waited on: it is nobody's lock.
            with open_regular(self.directory / name) as f:  # closing drops a lock we took
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except (OSError, FileIOError):
            return False  # never created (nobody has used it), or not a slot file
        return False

    def _path(self, slot: int) -> Path:
        return self.directory / self._name(slot)

    @staticmethod
    def _name(slot: int) -> str:
        return f"slot-{slot}.lock"


_SLOT_NAMES = frozenset(CpuShare._name(slot) for slot in range(SLOTS))
