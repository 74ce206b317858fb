"""What this machine costs and how to run on it: calibration tables, the flash attention choice,
the thread governor, and the one rule for where their measurements are kept.

Measured per model file, settings and machine (calibration.py does the measuring, a few
seconds per start at most, until final), kept in the calibration file, and handed to the
engine as plain numbers. Flash attention is never measured at a start (flashattn.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.backend.calibration import (
    ALWAYS_QUIET,
    DRAFT_SIZES,
    QUIET_SHARE,
    START_BUDGET,
    TARGET_SIZES,
    Quiet,
    Samples,
    cost_table,
    finished_table,
    measure,
    save_if_drifted,
    save_run_shape,
)
from specchat.backend.calibrationfile import CalibrationCache, machine_key
from specchat.backend.cpushare import CpuShare
from specchat.backend.flashattn import choice, measure_flash_attn
from specchat.backend.threads import ThreadGovernor
from specchat.engine.auto import AutoState
from specchat.engine.options import Spec
from specchat.fileio import FileIOError
from specchat.llm.ggml import default_threads
from specchat.paths import calibration_file
from specchat.settings.load import LoadSettings

if TYPE_CHECKING:
    from specchat.llm.model import LlamaModel

# 3: samples with a quiet check, and flash attention at llama.cpp's default unless confirmed
CALIBRATION_VERSION = 3  # bump to measure again what older versions measured differently


class Calibration:
    """The calibration file, and the one rule for its keys: the same file, load settings and
    machine have the same costs (`gpu`: the layer counts --n-gpu-layers auto chose)."""

    def __init__(self, settings: LoadSettings, gpu: str = "",
                 path: Path | None = None) -> None:
        self.cache = CalibrationCache(path or calibration_file())
        # Weights not repacked run other kernels: named only then, so that tables measured
        # before the setting existed keep their keys.
        self.knobs: dict[str, object] = {"n_gpu_layers": gpu or settings.n_gpu_layers,
                                         "threads": settings.threads,
                                         "version": CALIBRATION_VERSION,
                                         **({} if settings.repack else {"repack": False})}

    def costs_knobs(self, flash_attn: bool | None, exact: bool = False) -> dict[str, object]:
        """What keys a cost table: the load settings, flash attention as measured, and an
        exact target's cache types (llm/exact.py; named only when exact, so tables measured
        before it existed keep their keys)."""
        return {**self.knobs, "flash_attn": flash_attn, **({"exact": True} if exact else {})}

    def knob_variants(self) -> list[dict[str, object]]:
        """Every costs_knobs a load with these settings may key a table by (flash attention
        unset, off or on; exact or not): what `doctor` matches unlabelled entries against."""
        return [self.costs_knobs(flash, exact) for flash in (None, False, True)
                for exact in (False, True)]

    def costs_key(self, model: Path, flash_attn: bool | None, exact: bool = False) -> str:
        return machine_key(model, self.costs_knobs(flash_attn, exact))

    def flash_key(self, target: Path) -> str:
        return "flash-attn-" + machine_key(target, self.knobs)

    @staticmethod
    def acceptance_key(target: Path, draft: Path | None) -> str:
        # Acceptance belongs to the pair of models, not to how they are run.
        return "acceptance-" + machine_key(target, {"draft": str(draft) if draft else None})

    def save_quietly(self, key: str, value: object) -> None:
        """Learnt state is worth keeping, not worth failing an answer over."""
        try:
            self.cache.save_entry(key, value)
        except FileIOError:
            pass


@dataclass
class Tuned:
    """The loaded models as tuning sees them, and where their measurements are kept."""

    target: LlamaModel
    draft: LlamaModel | None
    target_path: Path
    draft_path: Path | None
    settings: LoadSettings
    calibration: Calibration


def measured_auto_state(tuned: Tuned, *, force: bool = False,
                        steady: Callable[[], bool] = lambda: False
                        ) -> tuple[AutoState, list[Callable[[], None]]]:
    """Cost tables for `auto`, from the calibration file or measured now (once), and what to
    run when the models close (write back drifted costs and learnt acceptance, and what the
    run's batches cost when `steady` says its steps had their cores: QuietSteps)."""
    settings, cal = tuned.settings, tuned.calibration
    if force and settings.flash_attn == "auto" and not tuned.target.exact:
        _confirm_flash_attn(tuned)  # an exact target keeps flash attention on (llm/exact.py)
    knobs = cal.costs_knobs(tuned.target.flash_attn, tuned.target.exact)

    def announce(name: str, measured: int, sizes: int) -> None:
        if not settings.quiet:
            how = "until every size is final" if force else \
                f"first starts only, {START_BUDGET:.0f} s at most, then the answer"
            print(f"specchat: measuring what {name} costs here ({how}; {measured}/{sizes} "
                  "batch sizes measured so far)", file=sys.stderr, flush=True)

    quiet = machine_quiet(settings)
    target = cost_table(tuned.target, tuned.target_path, TARGET_SIZES, knobs, cal.cache,
                        force=force, budget=START_BUDGET, quiet=quiet, announce=announce)
    draft = None
    if tuned.draft is not None and tuned.draft_path is not None:
        draft = cost_table(tuned.draft, tuned.draft_path, DRAFT_SIZES, knobs, cal.cache,
                           force=force, budget=START_BUDGET / 2, quiet=quiet,
                           announce=announce)
    state = AutoState(target_costs=target, draft_costs=draft)
    # What acceptance this model pair showed before: one-shot asks start from it, not from
    # the priors (docs/performance.md); written back when the runtime closes.
    learnt = cal.acceptance_key(tuned.target_path, tuned.draft_path)
    state.import_acceptance(cal.cache.load_entry(learnt))
    def save_costs() -> None:
        # A plain step that drifted more than 20% from the cached one is kept, and what the
        # run's batches cost beside their plain steps (timings only: kept when private too).
        save_if_drifted(target, tuned.target_path, knobs, cal.cache)
        if steady():
            save_run_shape(target, tuned.target_path, knobs, cal.cache)

    def save_learnt() -> None:
        if not settings.private:  # learnt from what was asked: private writes none of it
            cal.save_quietly(learnt, state.export_acceptance())

    return state, [save_costs, save_learnt]


# The most tokens a request may draft (GenerationOptions.draft_max): a draft model judged
# unable to pay at any length up to this never could under any request's settings.
DRAFT_MAX_LIMIT = 64


def unpaying_draft(calibration: Calibration, target_path: Path, draft_path: Path,
                   flash_attn: bool | None, exact: bool) -> float | None:
    """The draft step's cost in target steps when this machine's finished calibration says
    that `auto` could never draft with the draft model (AutoState.draft_model_can_pay, at any
    draft length, with better acceptance than any draft model reached): then an answer in
    `auto` alone need not load it. None when it could, or while either table is unfinished.
    The tables are keyed as measured_auto_state keys them (the target's knobs for both)."""
    knobs = calibration.costs_knobs(flash_attn, exact)
    target = finished_table(target_path, TARGET_SIZES, knobs, calibration.cache)
    draft = finished_table(draft_path, DRAFT_SIZES, knobs, calibration.cache)
    if target is None or draft is None:
        return None
    state = AutoState(target_costs=target, draft_costs=draft)
    if state.draft_model_can_pay(DRAFT_MAX_LIMIT):
        return None
    return draft.cost(1) / target.cost(1)


def plain_step_reference(tuned: Tuned, auto: AutoState | None) -> tuple[float, bool]:
    """Seconds of a plain step on a quiet machine: from the costs `auto` loaded, else the
    cached table, else the fastest of three single-token evals now (~0.1 s, not cached);
    and whether a quiet sample confirmed it (calibration.Quiet)."""
    cal = tuned.calibration
    key = cal.costs_key(tuned.target_path, tuned.target.flash_attn, tuned.target.exact)
    confirmed = Samples.from_entry(cal.cache.load_entry(key)).quiet.get(1, 0) > 0
    if auto is not None:
        return auto.target_costs.cost(1), confirmed
    table = cal.cache.load(key)
    if table is not None:
        return table.cost(1), confirmed
    return measure(tuned.target, sizes=(1,), repeats=3)[1], False


def thread_governor(tuned: Tuned, reference: Callable[[], tuple[float, bool]],
                    share: CpuShare | None = None) -> ThreadGovernor | None:
    """Fewer threads while other processes compete for the cores (backend/threads.py); not
    for GPU offload, nor when pinned to one thread, nor with SPECCHAT_FIXED_THREADS=1."""
    settings = tuned.settings
    threads = settings.threads or default_threads()
    if threads <= 1 or settings.n_gpu_layers not in (None, 0) or \
            os.environ.get("SPECCHAT_FIXED_THREADS") == "1":
        return None
    from specchat.llm import gpu_offload_supported

    if settings.n_gpu_layers is None and gpu_offload_supported():
        return None
    setters = [m.set_threads for m in (tuned.target, tuned.draft) if m is not None]
    seconds, confirmed = reference()
    return ThreadGovernor(threads, setters, seconds,
                          None if share is None else lambda: share.threads(threads),
                          confirmed=confirmed)


def machine_quiet(settings: LoadSettings, share: float = QUIET_SHARE) -> Quiet:
    """The quiet check for samples taken with these settings (off for GPU offload): CPU time
    at least `share` of the threads' wall time."""
    from specchat.llm import gpu_offload_supported

    gpu = settings.n_gpu_layers not in (None, 0) or (settings.n_gpu_layers is None
                                                     and gpu_offload_supported())
    return ALWAYS_QUIET if gpu else Quiet(settings.threads or default_threads(), share=share)


def flash_attn_for(settings: LoadSettings, calibration: Calibration, target: Path,
                   on_cpu: bool) -> bool | None:
    """What the target loads with: --flash-attn on/off, else what `bench --calibrate`
    confirmed for this file here, else auto's default (flashattn.unmeasured)."""
    return choice(settings.flash_attn,
                  calibration.cache.load_entry(calibration.flash_key(target)),
                  on_cpu=on_cpu, exact=settings.exact)


def _confirm_flash_attn(tuned: Tuned) -> None:
    """`bench --calibrate` with flash_attn auto: measure both settings; only a confirmed large
    difference is kept as this file's choice here, and applied now."""
    if not tuned.settings.quiet:
        print("specchat: measuring flash attention on and off (kept only if a large "
              "difference is confirmed on a quiet machine)", file=sys.stderr, flush=True)
    result = measure_flash_attn(tuned.target, tuned.target_path,
                                machine_quiet(tuned.settings))
    tuned.calibration.save_quietly(tuned.calibration.flash_key(tuned.target_path), result)
    tuned.target.set_flash_attn(choice("auto", result, on_cpu=tuned.target.on_cpu,
                                       exact=False))


def wants_auto_costs(settings: LoadSettings, speculation_allowed: bool) -> bool:
    """Whether loading must measure (or read) what `auto` decides with."""
    return settings.spec is Spec.AUTO and speculation_allowed
