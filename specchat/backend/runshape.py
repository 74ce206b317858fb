"""What verify batches cost in real runs, kept across runs beside the calibration.

A calibration is taken once, in one minute of one process. On a shared host that minute can be
odd: one priced a batch of 2 at 1.62 plain steps where the same machine's file said 1.96, and
deciding on the wrong one cost one-shot sessions 2.5-5% (docs/costs.md). A run cannot unlearn
it: each process starts again from the file, and an answer that drafts on most steps has too
few plain steps beside its batches to relearn the shape.

But every run sees what its batches cost against the plain steps just before them
(CostTable.paired). So a run that saw RUN_PAIRS of them for a size appends its median ratio to
the calibration entry (the last RUNS_KEPT runs), and once MIN_RUNS runs have spoken a start
prices that size at the median of the calibration's ratio and theirs: one odd calibration, or
one odd run, is outvoted.

A loaded run must not be learnt: its batches say what they cost while other processes held the
cores (or the thread governor ran one thread), and kept, that would outlast the load. The
caller keeps only runs whose steps had their cores (calibration.QuietSteps.steady). The ratios are
taken at whatever depth the run's answers ran (a long prompt's deeper steps), which is what
the user's own batches cost.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

RUN_PAIRS = 3  # batches of one size a run needs before its median says anything
RUNS_KEPT = 9  # per size, the latest runs' medians kept in the entry
MIN_RUNS = 3  # runs of a size before they outvote the calibration's ratio
RUNS = "runs"  # the entry's key


def run_ratios(paired: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """Per batch size, the median of a run's ratios of a batch to the plain step before it;
    sizes with fewer than RUN_PAIRS of them are left out."""
    out: dict[int, float] = {}
    for n, seen in paired.items():
        ratios = [ratio for ratio in seen if math.isfinite(ratio) and ratio > 0]
        if n > 1 and len(ratios) >= RUN_PAIRS:
            out[n] = statistics.median(ratios)
    return out


def runs_of(entry: object) -> dict[int, list[float]]:
    """The runs' medians an entry holds ({"runs": {"n": [ratio, ...]}}); bad data: none."""
    raw = entry.get(RUNS) if isinstance(entry, dict) else None
    out: dict[int, list[float]] = {}
    for key, values in (raw.items() if isinstance(raw, dict) else ()):
        try:
            n = int(key)
            ratios = [float(v) for v in values] if isinstance(values, list) else []
        except (TypeError, ValueError):
            continue
        kept = [r for r in ratios if math.isfinite(r) and r >= 1.0][-RUNS_KEPT:]
        if n > 1 and kept:
            out[n] = kept
    return out


def with_run(entry: object, ratios: Mapping[int, float]) -> object:
    """`entry` with this run's medians appended; `entry` itself when it is not a
    calibration (CalibrationCache.update then writes nothing)."""
    if not isinstance(entry, dict):
        return entry
    runs = runs_of(entry)
    for n, ratio in ratios.items():
        runs[n] = [*runs.get(n, []), max(float(ratio), 1.0)][-RUNS_KEPT:]
    return {**entry, RUNS: {str(n): runs[n] for n in sorted(runs)}}


def settled_shape(shape: Sequence[float], runs: Mapping[int, Sequence[float]]) -> list[float]:
    """Each batch size's ratio: once MIN_RUNS runs saw the size, the median of the
    calibration's and theirs. The sizes no run saw enough of move by the median factor the
    others moved by: a calibration's minute is off for every size alike (a slow plain step
    makes every batch look cheap), and correcting only the sizes runs use would leave the
    others looking cheap, so `auto` would move to them and lose."""
    settled = {n: statistics.median([shape[n - 1], *seen]) for n, seen in runs.items()
               if 1 < n <= len(shape) and len(seen) >= MIN_RUNS}
    if not settled:
        return list(shape)
    factor = statistics.median(ratio / shape[n - 1] for n, ratio in settled.items())
    return [shape[0], *(settled.get(n, max(shape[n - 1] * factor, 1.0))
                        for n in range(2, len(shape) + 1))]
