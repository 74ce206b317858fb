"""How many threads llama.cpp should use for the next step, from how long steps take.

llama.cpp's CPU threads meet at a spinning barrier after every operation. With two processes
on two cores each wanting both, a thread that loses its core leaves the other spinning until
the scheduler brings it back, and both processes collapse (docs/performance.md). One thread
needs no barrier. So when steps run far slower than calibrated, the governor tries one thread
for a few steps and keeps whichever count was faster; on one thread it tries all threads again
now and then. Every switch is decided by the two counts' measured speeds, side by side.

Steps of different batch sizes are compared through the cost table's shape: a batch of n
counts as seconds / (cost(n) / cost(1)), "seconds per plain-step equivalent".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

SLOW = 1.6  # all-thread steps this much slower than the reference: worth trying one thread
WINDOW = 6  # steps per judgement: one slow step is noise, six are a pattern
PROBE_EVERY = 48  # steps on one thread before trying all threads again
PROBE_MAX = 768  # a machine busy for long is probed less and less often
CHECK_EVERY = 512  # steps on all threads before trying one anyway (the reference may be bad)


class ThreadGovernor:
    """Chooses between all threads and one, per step; kept across answers."""

    def __init__(self, max_threads: int, setters: Sequence[Callable[[int], None]],
                 reference: float) -> None:
        self.max_threads = max_threads
        self.setters = list(setters)
        self.reference = reference  # seconds of a plain step on all threads, machine quiet
        self.threads = max_threads
        self.probing = False  # the current count is on trial against the other
        self.full_cost: float | None = None  # last window's median on all threads
        self.one_cost: float | None = None  # ... and on one
        self.window: list[float] = []
        self.since_switch = 0
        self.probe_every = PROBE_EVERY
        self.switches = 0

    def observe(self, seconds: float, ratio: float) -> None:
        """A verify call took `seconds`; `ratio` = cost(n) / cost(1) for its batch."""
        if seconds <= 0 or ratio <= 0 or self.max_threads <= 1:
            return
        self.since_switch += 1
        self.window.append(seconds / ratio)
        if len(self.window) < WINDOW:
            return
        median = statistics.median(self.window)
        self.window.clear()
        if self.threads == 1:
            self._judge_one(median)
        else:
            self._judge_full(median)

    def _judge_full(self, median: float) -> None:
        self.full_cost = median
        if self.probing:  # back from one thread to see whether all threads pay again
            self.probing = False
            if self.one_cost is not None and median > self.one_cost:
                self.probe_every = min(self.probe_every * 2, PROBE_MAX)
                self._set(1)
                return
            self.probe_every = PROBE_EVERY
        if median > SLOW * self.reference or self.since_switch >= CHECK_EVERY:
            self.probing = True
            self._set(1)
        else:
            self.reference = min(self.reference, median)

    def _judge_one(self, median: float) -> None:
        self.one_cost = median
        if self.probing:  # on trial: keep one thread only if it beat all threads
            self.probing = False
            if self.full_cost is not None and median >= self.full_cost:
                self._set(self.max_threads)
            return
        if self.since_switch >= self.probe_every:
            self.probing = True
            self._set(self.max_threads)

    def _set(self, threads: int) -> None:
        if threads != self.threads:
            self.switches += 1
        self.threads = threads
        self.since_switch = 0
        self.window.clear()
        for set_threads in self.setters:
            set_threads(threads)
