"""Flash attention: which setting a model runs with, and the one measurement that may change it.

The two settings are different kernels: at a near-tie they can pick different greedy tokens
(docs/exactness.md), so a temperature-0 answer must not depend on a timing taken on a busy
machine. The rule:

- `--flash-attn on|off` (or the config file) pins it;
- `auto` (the default): a `specchat bench --calibrate` measurement that confirmed a large
  difference here (every round quiet (Quiet), and the same setting faster by LARGE in every
  round) decides; an unconfirmed measurement changes nothing. Without one, a model whose
  layers all run on the CPU loads with it off: there a single-token step after a few hundred
  cached tokens is ~10% faster without it (docs/performance.md), and any thread count gives
  the same logits (docs/exactness.md). An exact target keeps it on (llm/exact.py), and
  layers on a GPU keep llama.cpp's own default.

Nothing is measured when a chat or an answer starts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.backend.calibration import ALWAYS_QUIET, Quiet, measure

LARGE = 1.25  # the slower setting takes at least this much longer, in every round
ROUNDS = 3
FLASH_DEPTHS = (64, 384)  # its cost moves with the depth (issue 13)
PINNED = {"on": True, "off": False}


def choice(setting: str, confirmed: object, *, on_cpu: bool, exact: bool) -> bool | None:
    """What a model loads with: pinned on/off, else a confirmed measurement's winner, else
    `unmeasured`."""
    if setting in PINNED:
        return PINNED[setting]
    if isinstance(confirmed, dict) and confirmed.get("confirmed") is True:
        winner = confirmed.get("flash_attn")
        if isinstance(winner, bool):
            return winner
    return unmeasured(on_cpu=on_cpu, exact=exact)


def unmeasured(*, on_cpu: bool, exact: bool) -> bool | None:
    """`auto` where nothing was confirmed: off on the CPU unless exact, else None (llama.cpp's
    default)."""
    return False if on_cpu and not exact else None


def describe(setting: str, source: str, confirmed: dict[str, Any]) -> list[tuple[str, str]]:
    """`specchat doctor` rows: the setting in force and every measurement kept here."""
    if setting in PINNED:
        meaning = f"pinned {setting}"
    else:
        meaning = ("off where every layer runs on the CPU (on for --exact), llama.cpp's "
                   "default with layers on a GPU, except for model files where `specchat "
                   "bench --calibrate` confirmed a large difference on a quiet machine")
    rows = [("flash attention", f"{setting} ({source}): {meaning}")]
    for entry in confirmed.values():
        if not isinstance(entry, dict) or "confirmed" not in entry:
            continue
        ratio = float(entry.get("ratio") or 1.0)
        measured = f"off took {ratio:.2f}x the time of on" if ratio >= 1 else \
            f"on took {1 / ratio:.2f}x the time of off"
        if entry.get("confirmed"):
            verdict = f"{'on' if entry.get('flash_attn') else 'off'} (confirmed: {measured})"
        else:
            verdict = f"auto's default (not confirmed: {measured}, " \
                      f"{entry.get('quiet_rounds', 0)}/{entry.get('rounds', 0)} rounds quiet)"
        rows.append((f"flash attention {entry.get('model', '?')}", verdict))
    return rows


def measure_flash_attn(model: Any, path: Path, quiet: Quiet = ALWAYS_QUIET,
                       rounds: int = ROUNDS,
                       clock: Callable[[], float] = time.perf_counter,
                       cpu_clock: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Time plain steps and a batch of 5 at a shallow and a deep context with flash attention
    on and off, alternating round by round; the model is left as it was (an empty cache).

    Confirmed only when every round was quiet and the same setting was at least LARGE
    faster in every round: a machine that drifts or is busy confirms nothing.
    """
    before = model.flash_attn
    ratios: list[float] = []
    quiet_rounds = 0
    try:
        for _ in range(rounds):
            score: dict[bool, float] = {}
            calm = True
            for enabled in (True, False):
                model.set_flash_attn(enabled)
                wall, cpu = clock(), cpu_clock()
                score[enabled] = _score(model, clock)
                calm = quiet(clock() - wall, cpu_clock() - cpu) and calm
            ratios.append(score[False] / score[True])  # > 1: on is faster
            quiet_rounds += int(calm)
    finally:
        model.set_flash_attn(before)
    on_wins, off_wins = all(r >= LARGE for r in ratios), all(r <= 1 / LARGE for r in ratios)
    confirmed = quiet_rounds == rounds and (on_wins or off_wins)
    return {"flash_attn": on_wins if confirmed else None, "confirmed": confirmed,
            "ratio": statistics.median(ratios), "rounds": rounds, "quiet_rounds": quiet_rounds,
            "model": path.name, "when": time.time()}


def _score(model: Any, clock: Callable[[], float]) -> float:
    """Seconds of a plain step plus a quarter of a batch of 5 (most steps are plain; 5 stands
    for a typical draft), summed over the depths that fit the context."""
    total = 0.0
    for depth in FLASH_DEPTHS:  # measure() keeps a depth within the context
        seconds = measure(model, (1, 5), 1, clock, depth)
        model.truncate(0)
        total += seconds[1] + seconds[5] / 4
    return total
