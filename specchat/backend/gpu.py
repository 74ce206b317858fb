"""How many layers go to the GPU: the user's number, else what fits (llm/gpufit.py sizes it
against the free memory llama.cpp's GPU backend reports)."""

from __future__ import annotations

import sys
from pathlib import Path

from specchat.errors import SpecchatError
from specchat.llm.gpufit import FitPlan, plan
from specchat.models import DEFAULT_TARGET, default_draft_for, resolve_model
from specchat.settings.load import LoadSettings
from specchat.settings.schema import BY_NAME


def gpu_layers(settings: LoadSettings, target: Path,
               draft: Path | None) -> tuple[tuple[int, int], FitPlan | None]:
    """n_gpu_layers for (target, draft), and the plan when --n-gpu-layers auto made one.

    A CPU-only build gets 0 without a word; a model that does not fit entirely gets one line.
    """
    if settings.n_gpu_layers is not None:
        return (settings.n_gpu_layers, settings.n_gpu_layers), None
    from specchat.llm import gpu_offload_supported

    if not gpu_offload_supported():
        return (0, 0), None
    fit = fit_plan(target, draft, settings.n_ctx)
    if fit is None:  # a GPU build whose backend reports no device memory: llama.cpp decides
        return (-1, -1), None
    line = fit.shortfall() or (fit.summary() if settings.verbose else None)
    if line and not settings.quiet:
        print(f"specchat: {line}", file=sys.stderr)
    return (fit.target.n_gpu_layers, fit.draft.n_gpu_layers if fit.draft else 0), fit


def gpu_key(layers: tuple[int, int], fit: FitPlan | None) -> str:
    """The layer counts auto chose ("TARGET/DRAFT"), "" when the user's number or the CPU."""
    return f"{layers[0]}/{layers[1]}" if fit is not None else ""


def fit_plan(target: Path, draft: Path | None, n_ctx: int) -> FitPlan | None:
    """The GPU placement for these files at n_ctx (0: trained), None without GPU memory info."""
    from specchat.llm import gpu_devices, read_model_shape

    devices = gpu_devices()
    if not devices:
        return None
    shape = read_model_shape(target)
    draft_shape = read_model_shape(draft) if draft is not None else None
    return plan(devices, shape, draft_shape, n_ctx=n_ctx or shape.n_ctx_train)


def describe_gpu_fit(model: str | None = None, n_ctx: int = BY_NAME["ctx"].default) -> str:
    """What --n-gpu-layers auto would choose for `model` (default target) and its default
    draft, from files already downloaded; one line for `specchat doctor`."""
    from specchat.llm import gpu_offload_supported

    if not gpu_offload_supported():
        return "0 layers: this llama.cpp build has no GPU backend (CPU only)"
    name = model or DEFAULT_TARGET
    target = resolve_model(name, pull=False, quiet=True)
    draft_name = default_draft_for(name)
    draft = None
    if draft_name:
        try:
            draft = resolve_model(draft_name, pull=False, quiet=True)
        except SpecchatError:
            draft = None  # not downloaded: size the target alone
    fit = fit_plan(target, draft, n_ctx)
    if fit is None:
        return "every layer: the GPU backend reports no free memory to size against"
    return f"{name} at --ctx {n_ctx}: {fit.shortfall() or fit.summary()}"
