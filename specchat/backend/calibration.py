"""Measure what a verify batch costs on this machine, per model file and machine.

The `auto` mode needs cost(n) for n = 1..17 before it has run enough steps to learn it. The
measurement must neither hold up a newcomer's first answer (a busy 2-core machine once took
157 s before the first token of a 135M model) nor be thrown off by load. So:

- each start measures for at most a few seconds (`budget`), and the first answer follows;
  small sizes first (what `auto` drafts most), and later starts fill in the rest. Until then
  an unmeasured size is priced high (Samples.table), so a table measured in part never makes
  a draft look cheaper than it is: `auto` drafts less, never worse;
- every sample says whether the machine was quiet while it ran: the eval's CPU time over its
  wall time and threads (`Quiet`). Threads that lost their cores to other processes show as
  a low share; such a sample counts only until a quiet one is seen, and a size is final after
  CONFIRMED quiet samples (or MAX_SAMPLES in all, on a machine that is never quiet);
- `specchat bench --calibrate` measures until every size is final.

The calibration file (calibrationfile.py) keeps the samples between starts; the engine keeps
refining the table from the steps it really runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specchat.backend.calibrationfile import (
    CalibrationCache,
    machine_key,
    origin,
    table_of,
)
from specchat.backend.runshape import RUNS, run_ratios, runs_of, settled_shape, with_run
from specchat.engine.cost import MAX_N, CostTable
from specchat.engine.policy import Step
from specchat.engine.protocol import LogitsModel
from specchat.fileio import FileIOError

# Every size: costs are not smooth in n (blocks of 4 and 8 rows), so interpolation misleads.
SIZES = tuple(range(1, 18))
TARGET_SIZES = SIZES
# The draft mostly runs single steps and one catch-up batch; 128 prices a long catch-up (a
# prompt the draft has not read yet), which `auto` weighs before filling a cold draft model.
DRAFT_SIZES = (1, 2, 4, 8, 17, 128)
PREFIX = 48  # positions already in the cache, so batches run at a realistic depth
SAMPLE_DEPTH = 16  # a start's samples: a short prefill first, so a slow machine starts soon


def measure(model: LogitsModel, sizes: tuple[int, ...] = SIZES, repeats: int = 3,
            clock: Callable[[], float] = time.perf_counter,
            depth: int = PREFIX) -> dict[int, float]:
    """Fastest of `repeats` evals of n tokens with all n logits rows, for each n, with
    `depth` more positions cached (verify costs grow with the depth).

    The minimum, not the mean: other processes only ever add time, so the minimum is the
    closest to what this model costs here. The cache is put back as it was.
    """
    keep = len(model.tokens)
    vocab = model.n_vocab
    depth = max(0, min(depth, model.n_ctx - keep - max(*sizes, 4) - 1))  # a small --ctx too
    filler = [(7 + 31 * i) % vocab for i in range(depth + max(*sizes, 4))]  # 4: the warm-up
    try:
        model.eval(filler[:depth], [])
        base = len(model.tokens)
        model.eval(filler[depth:depth + 4], [0, 1, 2, 3])  # warm-up: first calls allocate
        model.truncate(base)
        # Rounds over every size rather than repeats of one size in a row: a few slow
        # seconds on a shared machine then spoil one round of each size, not every try of
        # the sizes that happened to run then.
        out = {n: float("inf") for n in sizes}
        for _ in range(repeats):
            for n in sizes:
                start = clock()
                model.eval(filler[depth:depth + n], list(range(n)))
                out[n] = min(out[n], clock() - start)
                model.truncate(base)
        return out
    finally:
        model.truncate(keep)


CONFIRMED = 3  # quiet samples per size after which its cost is final
MAX_SAMPLES = 12  # samples per size after which a machine that is never quiet stops measuring
QUIET_SHARE = 0.6  # an eval's threads on a core at least this share of its wall time: quiet
START_BUDGET = 2.0  # seconds one start may spend measuring the target (half that: the draft)


@dataclass(frozen=True)
class Quiet:
    """Whether an eval ran on a quiet machine: its process used its threads' share of the wall
    time (CPU seconds >= QUIET_SHARE x threads x wall). Other processes taking the cores show
    as a low share. Off (always quiet) for GPU offload, where CPU time is not the work."""

    threads: int
    enabled: bool = True
    share: float = QUIET_SHARE

    def __call__(self, wall: float, cpu: float) -> bool:
        return not self.enabled or wall <= 0 or cpu >= self.share * self.threads * wall


ALWAYS_QUIET = Quiet(1, enabled=False)
# A step heard more than GAP times its own draft and verify time (plus GAP_SLACK seconds)
# after the one before follows a pause (between answers, a prefill): it is not judged. A run
# with more than LOADED_SHARE of its judged steps loaded, or fewer than MIN_JUDGED judged,
# is not steady. A step is loaded below STEADY_SHARE: stricter than a calibration sample's
# QUIET_SHARE, because a run's prices are kept for later starts. Real steps of the 1.5B on
# 2 cores (docs/costs.md): quiet, 0.93 and up; beside half a core busy in bursts, 0.81-0.89
# (plain steps 15-40% slower); beside a core held busy, about 0.5.
STEADY_SHARE = 0.85
GAP = 2.0
GAP_SLACK = 0.005
LOADED_SHARE = 0.1
MIN_JUDGED = 8


@dataclass
class QuietSteps:
    """Whether a run's steps had their cores: the Quiet check on each step, its process CPU
    time over the wall time since the step before (what llama.cpp's threads got while it
    ran), heard after every step (LoopHooks.on_step). Other processes on the cores, or the
    thread governor running fewer threads than configured, show as loaded steps."""

    quiet: Quiet
    clock: Callable[[], float] = time.perf_counter
    cpu_clock: Callable[[], float] = time.process_time
    judged: int = 0
    loaded: int = 0
    marks: tuple[float, float] | None = field(default=None, repr=False)  # (wall, cpu) then

    def __call__(self, step: Step) -> None:
        wall, cpu = self.clock(), self.cpu_clock()
        last, self.marks = self.marks, (wall, cpu)
        if last is None:
            return
        spent = wall - last[0]
        if spent <= 0 or spent > GAP * (step.verify_seconds + step.draft_seconds) + GAP_SLACK:
            return
        self.judged += 1
        self.loaded += not self.quiet(spent, cpu - last[1])

    def steady(self) -> bool:
        """Enough steps judged, nearly all of them quiet."""
        return self.judged >= MIN_JUDGED and self.loaded <= LOADED_SHARE * self.judged


@dataclass
class Samples:
    """Per batch size: the fastest eval seen, how many samples were quiet, how many in all."""

    best: dict[int, float] = field(default_factory=dict)
    quiet: dict[int, int] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: object) -> Samples:
        """What a cache entry holds ({"samples": {"n": [best, quiet, seen]}}); bad data: none."""
        found = cls()
        raw = entry.get("samples") if isinstance(entry, dict) else None
        for key, value in (raw.items() if isinstance(raw, dict) else ()):
            try:
                n, (best, quiet, seen) = int(key), value
                if float(best) > 0:
                    found.best[n], found.quiet[n], found.seen[n] = float(best), int(quiet), \
                        int(seen)
            except (TypeError, ValueError):
                continue
        return found

    def to_entry(self) -> dict[str, list[float]]:
        return {str(n): [self.best[n], self.quiet[n], self.seen[n]] for n in sorted(self.best)}

    def add(self, n: int, seconds: float, quiet: bool) -> None:
        """A quiet sample replaces what busy ones said; a busy one only fills a gap."""
        if quiet and self.quiet.get(n, 0) == 0:
            self.best.pop(n, None)  # busy samples so far: a quiet one knows better
        if quiet or self.quiet.get(n, 0) == 0:
            self.best[n] = min(self.best.get(n, float("inf")), seconds)
        self.quiet[n] = self.quiet.get(n, 0) + int(quiet)
        self.seen[n] = self.seen.get(n, 0) + 1

    def final(self, n: int) -> bool:
        return self.quiet.get(n, 0) >= CONFIRMED or self.seen.get(n, 0) >= MAX_SAMPLES

    def finished(self, sizes: tuple[int, ...]) -> bool:
        return all(self.final(n) for n in sizes)

    def pending(self, sizes: tuple[int, ...]) -> list[int]:
        """Sizes still to measure: fewest quiet samples first, small sizes first within."""
        todo = [n for n in sizes if not self.final(n)]
        return sorted(todo, key=lambda n: (self.quiet.get(n, 0), self.seen.get(n, 0), n))

    def table(self, sizes: tuple[int, ...]) -> CostTable | None:
        """The table of what was measured, every size of `sizes` not measured yet priced
        high: the next measured size's cost, and above the largest, the average cost per
        extra token so far going on (a plain step per token with only size 1: no gain)."""
        if not self.best:
            return None
        known = sorted(self.best)
        low, top = known[0], known[-1]
        per_token = (self.best[top] - self.best[low]) / (top - low) if top > low else \
            self.best[low]
        filled = dict(self.best)
        for n in sizes:
            if n not in filled:
                above = [m for m in known if m > n]
                filled[n] = self.best[above[0]] if above else \
                    self.best[top] + (n - top) * per_token
        return table_from(filled, max(MAX_N, *sizes))


def sample_costs(model: LogitsModel, sizes: tuple[int, ...], samples: Samples, *,
                 budget: float | None, quiet: Quiet = ALWAYS_QUIET, depth: int = SAMPLE_DEPTH,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time) -> Samples:
    """Add samples of evals of n tokens (all rows) at `depth`, pending sizes first, until
    every size is final or `budget` seconds have passed, counted from the start (None: until
    final); at least one sample. The cache is put back as it was.

    The first eval that asks for logits rows pays one-off costs (seven plain steps of the
    1.5B on 2 cores): one such eval, of the largest size to measure, is spent first and not
    counted. Counted, it priced a first start's single step far too high, every batch looked
    nearly free beside it, and `auto` drafted long where drafting lost (0.71x of `off`).
    """
    start, keep = clock(), len(model.tokens)
    depth = max(0, min(depth, model.n_ctx - keep - max(sizes) - 1))
    filler = [(7 + 31 * i) % model.n_vocab for i in range(depth + max(sizes))]
    taken = 0
    try:
        model.eval(filler[:depth], [])
        base = len(model.tokens)
        if pending := samples.pending(sizes):
            n = max(pending)
            model.eval(filler[depth:depth + n], list(range(n)))
            model.truncate(base)
        while not samples.finished(sizes):
            for n in samples.pending(sizes):
                if taken and budget is not None and clock() - start > budget:
                    return samples
                wall, cpu = clock(), cpu_clock()
                model.eval(filler[depth:depth + n], list(range(n)))
                wall, cpu = clock() - wall, cpu_clock() - cpu
                model.truncate(base)
                samples.add(n, wall, quiet(wall, cpu))
                taken += 1
        return samples
    finally:
        model.truncate(keep)


def table_from(measured: dict[int, float], max_n: int = MAX_N) -> CostTable:
    """The measured sizes as they are (not forced monotone: see CostTable), linear
    interpolation for sizes that were not measured."""
    sizes = sorted(measured)
    seconds: list[float] = []
    for n in range(1, max_n + 1):
        lo = max([s for s in sizes if s <= n], default=sizes[0])
        hi = min([s for s in sizes if s >= n], default=sizes[-1])
        if lo == hi:
            value = measured[lo]
        else:
            frac = (n - lo) / (hi - lo)
            value = measured[lo] + frac * (measured[hi] - measured[lo])
        seconds.append(value)
    return CostTable(seconds)


def cost_table(model: LogitsModel, path: Path, sizes: tuple[int, ...],
               knobs: dict[str, object], cache: CalibrationCache, *, force: bool = False,
               budget: float | None = START_BUDGET, quiet: Quiet = ALWAYS_QUIET,
               announce: Callable[[str, int, int], None] | None = None) -> CostTable:
    """The cached table for this model file and machine; while its sizes are not final, one
    more slice of measuring (at most `budget` seconds; force: until final, from scratch)."""
    key = machine_key(path, knobs)
    if not force:
        done = finished_table(path, sizes, knobs, cache)
        if done is not None:
            return done
    samples = Samples.from_entry(None if force else cache.load_entry(key))
    if announce is not None:
        announce(path.name, sum(1 for n in sizes if n in samples.best), len(sizes))
    sample_costs(model, sizes, samples, budget=None if force else budget, quiet=quiet)
    table = samples.table(sizes)
    assert table is not None  # at least one size was measured
    entry = {"seconds": table.seconds, "model": path.name, "when": time.time(),
             "samples": samples.to_entry(), **origin(path, knobs, sizes)}
    # What runs saw is kept through a new measurement: it is there to outvote one.
    cache.update(key, lambda old: {**entry, RUNS: old[RUNS]}
                 if isinstance(old, dict) and RUNS in old else entry)
    return table


def finished_table(path: Path, sizes: tuple[int, ...], knobs: dict[str, object],
                   cache: CalibrationCache) -> CostTable | None:
    """The cached table for this model file and machine when every size is final (nothing
    is measured here); None while any is not. One read of the cache file."""
    return table_in_force(cache.load_entry(machine_key(path, knobs)), sizes)


def table_in_force(entry: object, sizes: tuple[int, ...]) -> CostTable | None:
    """The table a calibration entry gives `auto` once every size is final, else None."""
    samples, cached = Samples.from_entry(entry), table_of(entry)
    if cached is None or not samples.finished(sizes):
        return None
    return _measured_shape(samples, sizes, cached, runs_of(entry))


def _measured_shape(samples: Samples, sizes: tuple[int, ...], cached: CostTable,
                    runs: dict[int, list[float]]) -> CostTable:
    """The cached table's plain step (rescaled when a run saw the machine drift) with the
    shape of the samples measured for it, where enough runs saw a size, settled by what they
    saw (runshape.py). Not a shape a run learnt: older versions wrote that back, on a loaded
    machine too, and it stayed in every later start."""
    measured = samples.table(sizes)
    if measured is None:
        return cached
    return CostTable.from_ratios(cached.cost(1), settled_shape(measured.shape, runs))


def save_if_drifted(table: CostTable, path: Path, knobs: dict[str, object],
                    cache: CalibrationCache) -> bool:
    """Write back the scale of a table the run rescaled for drift, so the next start begins
    from what the machine costs now; the shape stays the calibration's (CostTable.
    rescaled_start). A cache that cannot be written is not worth failing an answer for."""
    if not table.rescaled:
        return False
    try:
        cache.save(machine_key(path, knobs), table.rescaled_start, path.name,
                   origin(path, knobs, TARGET_SIZES))
    except FileIOError:
        return False
    return True


def save_run_shape(table: CostTable, path: Path, knobs: dict[str, object],
                   cache: CalibrationCache) -> bool:
    """Append what this run's batches cost beside their plain steps to the calibration
    entry (runshape.py; the caller leaves out a loaded run); best effort, as
    save_if_drifted."""
    ratios = run_ratios(table.paired)
    if not ratios:
        return False
    # with_run leaves an entry that is gone (the model file changed meanwhile) as it is, and
    # update then writes nothing; it never raises.
    cache.update(machine_key(path, knobs), lambda old: with_run(old, ratios))
    return True


def break_even_acceptance(target: CostTable, draft_step: float, k: int) -> float:
    """Per-position acceptance a draft model needs at draft length k to match plain decoding.

    Solves (1 - a^(k+1)) / (1 - a) = (verify(k+1) + k * draft_step) / verify(1) by bisection.
    """
    need = (target.cost(k + 1) + k * draft_step) / target.cost(1)
    if need >= k + 1:
        return float("inf")  # even perfect acceptance cannot pay
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        tokens = sum(mid ** i for i in range(k + 1))
        lo, hi = (mid, hi) if tokens < need else (lo, mid)
    return hi


def calibration_rows(target: CostTable, draft: CostTable | None,
                     max_k: int = 16) -> list[dict[str, float | int | None]]:
    """One row per draft length k: what verifying k+1 costs here, the ceiling a free drafter
    with perfect acceptance could reach, and the acceptance a draft model needs to break even."""
    rows: list[dict[str, float | int | None]] = []
    ratios = target.shape
    for k in range(max_k + 1):
        n = k + 1
        ratio = ratios[n - 1] if n <= len(ratios) else target.cost(n) / target.cost(1)
        even = break_even_acceptance(target, draft.cost(1), k) if draft and k else None
        rows.append({"k": k, "batch": n, "seconds": target.cost(n), "ratio": ratio,
                     "ceiling": n / ratio, "draft_break_even": even})
    return rows
