"""Run one function in several fresh processes at the same time (spawned: each imports what it
needs anew, as separate specchat commands do), for tests of files that processes share."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any


def run_together(target: Callable[..., None], calls: Sequence[tuple[Any, ...]],
                 timeout: float = 120) -> list[int | None]:
    """Start target(*args) for every args in `calls` at once; their exit codes, in order
    (None for one still running after `timeout` seconds)."""
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=target, args=args) for args in calls]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=timeout)
    return [process.exitcode for process in processes]
