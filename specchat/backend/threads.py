"""How many threads llama.cpp should use for the next step, from how long steps take.

llama.cpp's CPU threads meet at a spinning barrier after every operation. With two processes
on two cores each wanting both, a thread that loses its core leaves the other spinning until
the scheduler brings it back, and both processes collapse (docs/performance.md). One thread
needs no barrier. So when steps run far slower than calibrated, the governor tries one thread
for a few steps and keeps whichever count was faster; on one thread it tries all threads again
now and then. Every switch is decided by the two counts' measured speeds, side by side. A
collapse (steps tens of times slower than calibrated) is acted on within two steps, and a probe
of all threads that walks into one is abandoned after its first step: at a second or more per
collapsed step, waiting for a window of six cost more than the whole answer.

A backend part, not engine logic: the runtime lends the loop its step listener (LoopHooks.
on_step) and sets llama.cpp's threads; the engine never reads it.

Steps of different batch sizes are compared through the cost table's shape: a batch of n
counts as seconds / (cost(n) / cost(1)), "seconds per plain-step equivalent".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from specchat.engine.cost import CostTable
from specchat.engine.policy import Step, StepListener

SLOW = 1.6  # all-thread steps this much slower than the reference: worth trying one thread
WINDOW = 6  # steps per judgement: one slow step is noise, six are a pattern
PROBE_EVERY = 48  # steps on one thread before trying all threads again
PROBE_MAX = 768  # a machine busy for long is probed less and less often
CHECK_EVERY = 512  # steps on all threads before trying one anyway (the reference may be bad)
# Two processes spinning on two cores make a step 20-50x slower than calibrated; a window of
# six such steps costs seconds. So steps this far past the reference (two in a row) move to
# one thread at once, and a probe of all threads is abandoned at its first step that is this
# much slower than one thread was.
COLLAPSE = 4.0
PROBE_ABORT = 2.0
# One thread on trial gives up after TRIAL_EARLY steps that each took TRIAL_LOSS times the
# all-thread cost: on a quiet two-core machine a one-thread step is about 1.5x slower
# (docs/performance.md), so a whole window would cost every periodic check four more of them.
TRIAL_EARLY = 2
TRIAL_LOSS = 1.2
# Between two looks at how many specchat processes are decoding: at least this many steps and
# this much verify time. A look reads a directory and tries a lock per slot file (~0.2 ms just
# after a step, when caches are cold): every 4 steps was 1% of a 25 ms CPU step, and would be
# 4% of a 5 ms GPU step. Collapsed steps (a second or so each) still look every 4 steps.
SHARE_EVERY = 4
SHARE_SECONDS = 0.25


class ThreadGovernor:
    """Chooses between all threads and one, per step; kept across answers."""

    def __init__(self, max_threads: int, setters: Sequence[Callable[[int], None]],
                 reference: float, share: Callable[[], int] | None = None,
                 confirmed: bool = True) -> None:
        self.cores = max_threads  # what it was configured for
        self.max_threads = max_threads  # "all threads" now: cores / specchat processes decoding
        self.setters = list(setters)
        self.full_reference = reference  # seconds of a plain step on every core, machine quiet
        self.reference = reference  # ... on max_threads
        # How many threads this process's share of the cores is (other specchat processes
        # decoding take theirs); asked again after SHARE_EVERY steps and SHARE_SECONDS of
        # verify time. None: no sharing.
        self.share = share
        self.since_share = 0
        self.share_seconds = 0.0  # verify time since the last look
        self.threads = max_threads
        self.probing = False  # the current count is on trial against the other
        self.full_cost: float | None = None  # last window's median on all threads
        self.one_cost: float | None = None  # ... and on one
        self.window: list[float] = []
        self.since_switch = 0
        self.probe_every = PROBE_EVERY
        self.switches = 0
        # A reference not taken on a quiet machine (a first start on a busy one) may be far
        # too slow to show a collapse: then one thread is tried after the first window, and
        # the two counts' measured speeds decide, as at every later check.
        self.check_after = CHECK_EVERY if confirmed else WINDOW

    def observe(self, seconds: float, ratio: float) -> None:
        """A verify call took `seconds`; `ratio` = cost(n) / cost(1) for its batch."""
        self.since_share += 1
        self.share_seconds += max(seconds, 0.0)
        if self.share is not None and self.since_share >= SHARE_EVERY \
                and self.share_seconds >= SHARE_SECONDS:
            self.set_limit(self.share())
        if seconds <= 0 or ratio <= 0 or self.max_threads <= 1:
            return
        self.since_switch += 1
        cost = seconds / ratio
        self.window.append(cost)
        if self.threads == self.max_threads and self._collapsed(cost):
            return
        if self.threads == 1 and self._one_lost_early():
            return
        if len(self.window) < WINDOW:
            return
        median = statistics.median(self.window)
        self.window.clear()
        if self.threads == 1:
            self._judge_one(median)
        else:
            self._judge_full(median)

    def step_listener(self, costs: CostTable | None) -> StepListener:
        """What the loop calls after every step (LoopHooks.on_step): its verify time, a
        batch counted as cost(n) / cost(1) plain steps on `costs` (None: n of them)."""
        def hear(step: Step) -> None:
            size = step.batch
            self.observe(step.verify_seconds,
                         costs.cost(size) / costs.cost(1) if costs is not None else float(size))
        return hear

    def set_limit(self, threads: int) -> None:
        """Use at most `threads` from now on (another specchat process started or ended):
        the counts are set at once, and the judging starts over from them."""
        self.since_share, self.share_seconds = 0, 0.0
        threads = max(1, min(threads, self.cores))
        if threads == self.max_threads:
            return
        self.max_threads = threads
        self.reference = self.full_reference * self.cores / threads  # roughly: fewer cores
        self.probing, self.full_cost, self.one_cost = False, None, None
        self.probe_every = PROBE_EVERY
        self._set(threads)

    def _collapsed(self, cost: float) -> bool:
        """On all threads: act on a collapse within a step or two instead of a window."""
        if self.probing and self.one_cost is not None and cost > PROBE_ABORT * self.one_cost:
            self.probing = False  # the probe failed at once: back to one thread
            self.probe_every = min(self.probe_every * 2, PROBE_MAX)
            self._set(1)
            return True
        slow = self.window[-2:]
        if not self.probing and len(slow) == 2 and min(slow) > COLLAPSE * self.reference:
            self.full_cost = min(slow)
            self.probing = True
            self._set(1)
            return True
        return False

    def _one_lost_early(self) -> bool:
        """On trial on one thread: give up as soon as it plainly loses."""
        if not self.probing or self.full_cost is None or len(self.window) != TRIAL_EARLY or \
                min(self.window) <= TRIAL_LOSS * self.full_cost:
            return False
        self._judge_one(statistics.median(self.window))
        return True

    def _judge_full(self, median: float) -> None:
        self.full_cost = median
        if self.probing:  # back from one thread to see whether all threads pay again
            self.probing = False
            if self.one_cost is not None and median > self.one_cost:
                self.probe_every = min(self.probe_every * 2, PROBE_MAX)
                self._set(1)
                return
            self.probe_every = PROBE_EVERY
        if median > SLOW * self.reference or self.since_switch >= self.check_after:
            self.probing = True
            self.check_after = CHECK_EVERY
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
