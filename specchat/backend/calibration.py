"""Measure what a verify batch costs on this machine, once per model file and machine.

The `auto` mode needs cost(n) for n = 1..17 before it has run enough steps to learn it; a
short measurement at load gives it, and a small JSON cache keeps it from being repeated every
start. The engine then keeps refining the table from the steps it really runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat import storage
from specchat.engine.cost import MAX_N, CostTable
from specchat.engine.protocol import LogitsModel
from specchat.storage import StorageError

# Every size: costs are not smooth in n (blocks of 4 and 8 rows), so interpolation misleads.
SIZES = tuple(range(1, 18))
TARGET_SIZES = SIZES
# The draft mostly runs single steps and one catch-up batch; 128 prices a long catch-up (a
# prompt the draft has not read yet), which `auto` weighs before filling a cold draft model.
DRAFT_SIZES = (1, 2, 4, 8, 17, 128)
PREFIX = 48  # positions already in the cache, so batches run at a realistic depth


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


FLASH_DEPTHS = (64, 384)  # flash attention's cost moves with the depth (issue 13)


def choose_flash_attn(model: Any, repeats: int = 2,
                      clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Flash attention on or off, whichever makes plain steps and a batch of 5 cheaper at a
    shallow and a deep context; the model is left with the winner (and an empty cache).

    The two settings alternate round by round, so a machine that drifts meanwhile hits both;
    each keeps its fastest round.
    """
    best: dict[bool, dict[tuple[int, int], float]] = {True: {}, False: {}}
    for _ in range(repeats):
        for enabled in (True, False):
            model.set_flash_attn(enabled)
            for depth in FLASH_DEPTHS:
                for n, seconds in measure(model, (1, 5), 1, clock, depth).items():
                    model.truncate(0)
                    old = best[enabled].get((depth, n), float("inf"))
                    best[enabled][(depth, n)] = min(old, seconds)
    # Most steps are plain; a batch of 5 stands for auto's typical draft.
    score = {e: sum(s if n == 1 else s / 4 for (_, n), s in t.items()) for e, t in best.items()}
    choice = score[True] <= score[False]
    model.set_flash_attn(choice)
    return {"flash_attn": choice, "score_on": score[True], "score_off": score[False],
            "when": time.time()}


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


def machine_key(model_path: Path, settings: dict[str, object]) -> str:
    """Same file, same settings, same machine: the same costs."""
    st = model_path.stat() if model_path.exists() else None
    parts = [str(model_path.resolve()), str(st.st_size if st else 0),
             str(int(st.st_mtime) if st else 0), platform.node(), platform.machine(),
             platform.processor(), str(os.cpu_count()), json.dumps(settings, sort_keys=True)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


class CalibrationCache:
    """A JSON file of measured cost tables keyed by machine_key; corrupt files are ignored.

    Best-effort both ways: a file that cannot be read is measured again, and one that cannot
    be written (read-only cache, a directory in its place) costs one warning, never the run.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warned = False

    def load(self, key: str) -> CostTable | None:
        try:
            data = json.loads(self.path.read_text())
            seconds = data[key]["seconds"]
            if isinstance(seconds, list) and seconds and all(
                    isinstance(s, (int, float)) and s > 0 for s in seconds):
                return CostTable([float(s) for s in seconds])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def save(self, key: str, table: CostTable, label: str) -> None:
        self.save_entry(key, {"seconds": table.seconds, "model": label, "when": time.time()})

    def load_entry(self, key: str) -> object | None:
        """Any JSON value stored under key (the caller validates it), or None."""
        try:
            data = json.loads(self.path.read_text())
            return data.get(key) if isinstance(data, dict) else None
        except (OSError, ValueError):
            return None

    def save_entry(self, key: str, value: object) -> None:
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data[key] = value
        try:
            storage.atomic_write(self.path, json.dumps(data, indent=1), private=False)
        except (StorageError, OSError) as exc:
            if not self.warned:
                self.warned = True
                print(f"specchat: warning: calibration not cached ({exc}); it is measured "
                      "again next time", file=sys.stderr)


def cost_table(model: LogitsModel, path: Path, sizes: tuple[int, ...],
               knobs: dict[str, object], cache: CalibrationCache, *, force: bool = False,
               announce: Callable[[str], None] | None = None) -> CostTable:
    """The cached table for this model file and machine, or a fresh measurement (saved)."""
    key = machine_key(path, knobs)
    table = None if force else cache.load(key)
    if table is None:
        if announce is not None:
            announce(path.name)
        table = table_from(measure(model, sizes=sizes), max(MAX_N, *sizes))
        cache.save(key, table, path.name)
    return table


def save_if_drifted(table: CostTable, path: Path, knobs: dict[str, object],
                    cache: CalibrationCache) -> bool:
    """Write back a table the run rescaled for drift, so the next start begins from what the
    machine costs now. A cache that cannot be written is not worth failing an answer for."""
    if not table.rescaled:
        return False
    try:
        cache.save(machine_key(path, knobs), table, path.name)
    except StorageError:
        return False
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
    ratios = target.ratios()
    for k in range(max_k + 1):
        n = k + 1
        ratio = ratios[n - 1] if n <= len(ratios) else target.cost(n) / target.cost(1)
        even = break_even_acceptance(target, draft.cost(1), k) if draft and k else None
        rows.append({"k": k, "batch": n, "seconds": target.cost(n), "ratio": ratio,
                     "ceiling": n / ratio, "draft_break_even": even})
    return rows
