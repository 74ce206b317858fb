"""What this machine costs and how to run on it: calibration tables, the flash attention choice,
the thread governor, and where they are cached.

Measured once per model file, settings and machine (specchat/calibration.py does the
measuring), kept in the calibration cache, and handed to the engine as plain numbers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.cpushare import CpuShare
from specchat.engine.auto import AutoState
from specchat.engine.threads import ThreadGovernor
from specchat.llm.gpufit import FitPlan

if TYPE_CHECKING:
    from specchat.calibration import CalibrationCache
    from specchat.runtime import LoadSettings, Runtime


def plain_step_reference(runtime: Runtime, settings: LoadSettings) -> float:
    """Seconds of a plain step on a quiet machine: from the calibration `auto` loaded, else
    the cached one, else the fastest of three single-token evals now (~0.1 s, not cached)."""
    from specchat.calibration import machine_key, measure

    if not runtime.speculation_allowed:
        return float("inf")  # a recurrent cache cannot be measured and put back
    if settings.spec == "auto":
        return runtime.auto.target_costs.cost(1)
    cache, knobs = _calibration_cache(settings, runtime.info.gpu_layers)
    knobs["flash_attn"] = getattr(runtime.target, "flash_attn", None)  # as auto keys it
    table = cache.load(machine_key(Path(runtime.info.target_path), knobs))
    if table is not None:
        return table.cost(1)
    return measure(runtime.target, sizes=(1,), repeats=3)[1]


def thread_governor(models: Sequence[Any], settings: LoadSettings,
                    reference: Callable[[], float], share: CpuShare | None = None
                    ) -> ThreadGovernor | None:
    """Fewer threads while other processes compete for the cores (engine/threads.py); not
    for GPU offload, nor when pinned to one thread, nor with SPECCHAT_FIXED_THREADS=1."""
    from specchat.llm.helpers import default_threads

    threads = settings.threads or default_threads()
    setters = [m.set_threads for m in models if m is not None and hasattr(m, "set_threads")]
    if threads <= 1 or not setters or settings.n_gpu_layers not in (None, 0) or \
            os.environ.get("SPECCHAT_FIXED_THREADS") == "1":
        return None
    from specchat.llm import gpu_offload_supported

    if settings.n_gpu_layers is None and gpu_offload_supported():
        return None
    return ThreadGovernor(threads, setters, reference(),
                          None if share is None else lambda: share.threads(threads))


def measured_auto_state(runtime: Runtime, settings: LoadSettings,
                        force: bool = False) -> AutoState:
    """Cost tables for `auto`: from the calibration cache, else measured now (once)."""
    from specchat.calibration import (
        DRAFT_SIZES,
        TARGET_SIZES,
        cost_table,
        machine_key,
        save_if_drifted,
    )

    cache, knobs = _calibration_cache(settings, runtime.info.gpu_layers)
    target_path = Path(runtime.info.target_path)
    if force or getattr(runtime.target, "flash_attn", False) is None:
        _choose_flash_attn(runtime, target_path, settings, cache)
    knobs = {**knobs, "flash_attn": getattr(runtime.target, "flash_attn", None)}

    def announce(name: str) -> None:
        if not settings.quiet:
            print(f"specchat: measuring what {name} costs on this machine (once; cached)",
                  file=sys.stderr)

    target = cost_table(runtime.target, target_path, TARGET_SIZES, knobs,
                        cache, force=force, announce=announce)
    # Costs that drifted more than 20% from the cached ones during this session are kept.
    def save_drifted() -> None:
        save_if_drifted(target, target_path, knobs, cache)

    runtime.closers.insert(0, save_drifted)
    draft = None
    if runtime.draft is not None:
        draft = cost_table(runtime.draft, Path(runtime.info.draft_path or ""), DRAFT_SIZES,
                           knobs, cache, force=force, announce=announce)
    state = AutoState(target_costs=target, draft_costs=draft)
    # What acceptance this model pair showed before: one-shot asks start from it, not from
    # the priors (docs/performance.md); written back when the runtime closes.
    learnt = "acceptance-" + machine_key(target_path, {"draft": runtime.info.draft_path})
    state.import_acceptance(cache.load_entry(learnt))
    runtime.closers.insert(0, lambda: _save_quietly(cache, learnt, state.export_acceptance()))
    return state


def gpu_key(layers: tuple[int, int], fit: FitPlan | None) -> str:
    """The layer counts auto chose ("TARGET/DRAFT"), "" when the user's number or the CPU."""
    return f"{layers[0]}/{layers[1]}" if fit is not None else ""


def cached_flash_attn(target_path: Path, settings: LoadSettings, gpu: str = "") -> bool | None:
    """Flash attention as measured best for this file here (None: not measured yet)."""
    from specchat.calibration import machine_key

    cache, knobs = _calibration_cache(settings, gpu)
    entry = cache.load_entry("flash-attn-" + machine_key(target_path, knobs))
    choice = entry.get("flash_attn") if isinstance(entry, dict) else None
    return choice if isinstance(choice, bool) else None


def _choose_flash_attn(runtime: Runtime, target_path: Path, settings: LoadSettings,
                       cache: CalibrationCache) -> None:
    """Measure flash attention on and off (once per file and machine) and keep the winner."""
    from specchat.calibration import choose_flash_attn, machine_key

    if not hasattr(runtime.target, "set_flash_attn"):
        return
    if not settings.quiet:
        print("specchat: measuring flash attention on and off here (once; cached)",
              file=sys.stderr)
    _, knobs = _calibration_cache(settings, runtime.info.gpu_layers)
    result = choose_flash_attn(runtime.target)
    _save_quietly(cache, "flash-attn-" + machine_key(target_path, knobs), result)


def _save_quietly(cache: CalibrationCache, key: str, value: object) -> None:
    """Learnt state is worth keeping, not worth failing an answer over."""
    from specchat.storage import StorageError

    try:
        cache.save_entry(key, value)
    except StorageError:
        pass


def _calibration_cache(settings: LoadSettings, gpu: str = ""
                       ) -> tuple[CalibrationCache, dict[str, object]]:
    """The calibration file and the load settings that key its tables (`gpu`: the layer
    counts auto chose; costs measured with other counts differ)."""
    from specchat.calibration import CalibrationCache
    from specchat.models import cache_dir

    knobs: dict[str, object] = {"n_gpu_layers": gpu or settings.n_gpu_layers,
                                "threads": settings.threads, "version": 2}
    return CalibrationCache(cache_dir().parent / "calibration.json"), knobs
