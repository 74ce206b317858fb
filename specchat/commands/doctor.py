"""`specchat doctor`: what this install can do, and what to change when it could do more.

Reports Python and llama-cpp-python versions, llama.cpp's build (CPU features, compiled
backends, devices, GPU offload), the model cache and which presets are in it, and which
backends/ profile fits this machine. Every probe degrades to a row that says what failed, so
doctor itself never crashes on the thing it is diagnosing.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from specchat import __version__
from specchat.term import output
from specchat.term.safe import visible

# ggml registry backend name -> backends/ profile that builds it.
PROFILE_FOR_BACKEND = {"CUDA": "cuda", "Metal": "metal", "Vulkan": "vulkan", "CPU": "cpu"}


@dataclass(frozen=True)
class Machine:
    """What the hint depends on; a value object so the rule is testable anywhere."""

    system: str  # platform.system(): "Linux", "Darwin", "Windows"
    arch: str  # platform.machine(): "x86_64", "arm64", ...
    has_nvidia: bool  # nvidia-smi on PATH
    has_vulkan: bool  # vulkaninfo on PATH

    @classmethod
    def here(cls) -> Machine:
        return cls(platform.system(), platform.machine(), shutil.which("nvidia-smi") is not None,
                   shutil.which("vulkaninfo") is not None)


def suggest_profile(built: str, machine: Machine) -> tuple[str, str]:
    """(profile, hint) for a build whose GPU backend is `built` ("CPU", "CUDA", ...)."""
    if machine.system == "Darwin" and machine.arch == "arm64":
        best, why = "metal", "Apple silicon"
    elif machine.has_nvidia:
        best, why = "cuda", "an NVIDIA GPU (nvidia-smi found)"
    elif machine.has_vulkan:
        best, why = "vulkan", "a Vulkan driver (vulkaninfo found)"
    else:
        best, why = "cpu", "no GPU toolkit found"
    current = PROFILE_FOR_BACKEND.get(built, built.lower())
    if current == best:
        return best, f"the installed {built} build fits this machine ({why})"
    if best == "cpu":
        return current, f"{built} build, but {why}: it runs on the CPU unless a device is found"
    return best, (f"this machine has {why} but llama-cpp-python was built for {built}: "
                  f"run backends/install.sh {best}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("doctor")(doctor_command)


def doctor_command(
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Check the install: versions, llama.cpp build and GPU offload, model cache, backend hint."""
    rows, healthy = collect()
    if as_json:
        output.line(json.dumps(dict(rows), indent=2))
    elif sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        _print_rich(rows)
    else:
        for key, value in rows:
            output.line(f"{key}: {value}")
    if not healthy:
        raise typer.Exit(1)


def collect() -> tuple[list[tuple[str, str]], bool]:
    """The report rows, and False when specchat cannot run here (no llama-cpp-python)."""
    rows: list[tuple[str, str]] = [
        ("specchat", __version__),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.system()} {platform.machine()}"),
    ]
    llama_rows, built = _llama_rows()
    rows += llama_rows
    rows += _cache_rows()
    if built is not None:
        rows += _guard("gpu fit", _gpu_rows)
    rows += _guard("calibration", _calibration_rows)
    rows += _guard("kernels (flash attention, exact, repack)", _kernel_rows)
    rows += _guard("drafting store", _draft_store_rows)
    rows += _guard("local models", _local_rows)
    if built is None:
        profile = suggest_profile("CPU", Machine.here())[0]
        rows.append(("hint", f"install llama-cpp-python: backends/install.sh {profile}"))
    else:
        profile, hint = suggest_profile(built, Machine.here())
        rows.append(("profile", profile))
        rows.append(("hint", hint))
    return rows, built is not None


def _llama_rows() -> tuple[list[tuple[str, str]], str | None]:
    """llama.cpp facts, and the GPU backend it was built with (None: not importable)."""
    try:
        from specchat.llm.files import system_info
    except (ImportError, OSError) as exc:  # OSError: the shared library failed to load
        return [("llama-cpp-python", f"not usable: {exc}")], None
    info = system_info()
    keys = ("llama-cpp-python", "llama.cpp system info", "backends", "devices", "gpu offload")
    return [(key, info[key]) for key in keys], info["backend"]


def _gpu_rows() -> list[tuple[str, str]]:
    """What --n-gpu-layers auto chooses for the default target and draft here."""
    from specchat.backend.gpu import describe_gpu_fit

    return [("gpu fit", describe_gpu_fit())]


def _calibration_rows() -> list[tuple[str, str]]:
    """What `auto` measured on this machine: verify cost ratios per model file and settings
    (bench --calibrate: details). Entries of another CPU or host, of a model file since
    changed, or of an older specchat are counted in one row, not shown as if in force."""
    from specchat.backend.calibrationfile import CalibrationCache, measured_here, table_of
    from specchat.paths import calibration_file

    path = calibration_file()
    entries = {key: entry for key, entry in CalibrationCache(path).read().items()
               if table_of(entry) is not None}
    guess = _unlabelled_guesses()
    rows = []
    for key, entry in entries.items():
        knobs = measured_here(key, entry, guess(entry))
        if knobs is not None:
            rows.append(_calibration_row(entry, knobs))
    unused = len(entries) - len(rows)
    if not rows:
        rows.append(("calibration", "none for this machine yet: the first `auto` runs measure "
                     "it, a few seconds each (or run `specchat bench --calibrate`)"))
    if unused:
        rows.append(("calibration elsewhere", f"{unused} more in {path}, not used here: "
                     "another CPU or host, a model file since changed, other settings or an "
                     "older specchat"))
    return rows


def _unlabelled_guesses() -> Callable[[object], list[tuple[Path, dict[str, object]]]]:
    """For entries written before they named their model file and settings: that file in
    specchat's model cache (by its bare name), under every way the current settings key it."""
    from specchat.backend.tuning import Calibration
    from specchat.models import cache_dir
    from specchat.settings.file import resolve
    from specchat.settings.load import LoadSettings

    names = ["threads", "n_gpu_layers", "repack"]
    variants = Calibration(LoadSettings.from_settings(resolve(names, {}))).knob_variants()
    cache = cache_dir()

    def guesses(entry: object) -> list[tuple[Path, dict[str, object]]]:
        name = entry.get("model") if isinstance(entry, dict) else None
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            return []  # a bare file name only: nothing in the file chooses a directory
        return [(cache / name, knobs) for knobs in variants]

    return guesses


def _calibration_row(entry: dict[str, Any], knobs: dict[str, object]) -> tuple[str, str]:
    """One table in force here: its settings, plain step, batch costs and how final."""
    from specchat.backend.calibration import (
        DRAFT_SIZES,
        TARGET_SIZES,
        Samples,
        table_in_force,
    )
    from specchat.backend.runshape import MIN_RUNS, runs_of

    seconds = entry["seconds"]
    sizes = entry.get("sizes")
    if not (isinstance(sizes, list) and sizes and all(isinstance(n, int) for n in sizes)):
        sizes = list(TARGET_SIZES if len(seconds) <= len(TARGET_SIZES) else DRAFT_SIZES)
    table = table_in_force(entry, tuple(sizes))
    in_force = table.seconds if table is not None else seconds
    ratios = ", ".join(f"{n}:{in_force[n - 1] / in_force[0]:.2f}"
                       for n in (2, 4, 8, 17) if n <= len(in_force))
    samples = Samples.from_entry(entry)
    final = sum(1 for n in sizes if samples.final(n))
    settled = sum(1 for seen in runs_of(entry).values() if len(seen) >= MIN_RUNS)
    return (f"calibration {entry.get('model', '?')} ({_knobs_label(knobs)})",
            f"step {in_force[0] * 1000:.1f} ms; batch cost x step {ratios}; "
            f"{final}/{len(sizes)} sizes final" +
            (f"; runs settled {settled} of its sizes" if settled else ""))


def _knobs_label(knobs: dict[str, object]) -> str:
    """The settings a table was measured under, as the options that give them."""
    threads, flash, gpu = knobs.get("threads"), knobs.get("flash_attn"), knobs.get("n_gpu_layers")
    parts = [f"{threads} threads" if threads else "default threads"]
    if flash is not None:
        parts.append(f"flash attention {'on' if flash else 'off'}")
    if knobs.get("exact"):
        parts.append("--exact")
    if knobs.get("repack") is False:
        parts.append("--no-repack")
    if gpu not in (None, ""):
        parts.append(f"GPU layers {gpu}")
    return ", ".join(parts)


def _kernel_rows() -> list[tuple[str, str]]:
    """Flash attention as loads will choose it (the option and where it came from), what
    `bench --calibrate` measured here, and the options that pick other kernels."""
    from specchat.backend.calibrationfile import CalibrationCache
    from specchat.backend.flashattn import describe
    from specchat.paths import calibration_file
    from specchat.settings.file import resolve

    settings = resolve(["flash_attn", "exact", "repack"], {})
    measured = {k: v for k, v in CalibrationCache(calibration_file()).read().items()
                if k.startswith("flash-attn-")}
    return [*describe(settings["flash_attn"], settings.sources["flash_attn"], measured),
            ("exact", _exact_meaning(settings["exact"], settings["flash_attn"]) +
             f" ({settings.sources['exact']})"),
            ("repack", _repack_meaning(settings["repack"]) + f" ({settings.sources['repack']})")]


def _repack_meaning(repack: bool) -> str:
    if repack:
        return "on: weights repacked at load for the CPU's fastest decoding kernels " \
               "(--no-repack: a faster load and long prompt, slower tokens)"
    return "off: weights as the file stores them; the load and a long prompt are faster, " \
           "every token slower than with --repack"


def _exact_meaning(exact: bool, flash_attn: str) -> str:
    if not exact:
        return "off: verify batches of any size; greedy answers equal --spec off's except " \
               "where two tokens tie within batched-vs-single float noise (--exact: token " \
               "for token, at a cost)"
    if flash_attn == "off":
        return "asked for, but flash attention is pinned off, without which no batch is " \
               "exact: greedy answers may differ from --spec off at near-ties"
    from specchat.llm.exact import EXACT_PREFILL_COST, EXACT_ROWS

    return f"on for targets on the CPU (V cache bf16, at most {EXACT_ROWS} rows per greedy " \
           "verify): greedy answers equal --spec off's; a long prefill (cold or after " \
           f"cached tokens) takes about {EXACT_PREFILL_COST:.1f}x as long as without; not " \
           "applied to layers on a GPU"


def _draft_store_rows() -> list[tuple[str, str]]:
    """Where earlier prompts and answers are kept for `auto` to draft from, and how big."""
    from specchat.backend.draftstore import usage_by_vocabulary
    from specchat.paths import draft_store_dir

    usage = usage_by_vocabulary()
    answers = sum(n for _, _, n in usage.values())
    size = sum(b for _, b, _ in usage.values())
    what = f"{answers} answers, {size / 1e6:.1f} MB" if usage else "empty"
    return [("drafting store", f"{draft_store_dir()} ({what}; at most the draft_store "
             "option per vocabulary; `specchat history store` for details)")]


def _cache_rows() -> list[tuple[str, str]]:
    return _guard("models", _models_rows)


def _models_rows() -> list[tuple[str, str]]:
    from specchat.models import cache_dir, load_presets, preset_file, preset_present

    cache = cache_dir()
    presets = load_presets()
    present = [p.name for p in presets.values() if preset_present(p)]
    missing = [p.name for p in presets.values() if not preset_present(p)]
    known = {preset_file(p).name for p in presets.values()}
    others = sorted(f.name for f in cache.glob("*.gguf") if f.name not in known) \
        if cache.is_dir() else []
    rows = [("cache", f"{cache}{'' if cache.is_dir() else ' (not created yet)'}"),
            ("models present", ", ".join(present) or "none"),
            ("models not downloaded", ", ".join(missing) or "none")]
    if others:
        rows.append(("other files in cache", ", ".join(others)))
    return rows


def _local_rows() -> list[tuple[str, str]]:
    """Models other tools keep here, and the draft a start would find (models --local)."""
    from specchat.commands.local_models import doctor_rows

    return doctor_rows()


def _guard(label: str, probe: Callable[[], list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Run a probe; a failure becomes one row saying so (e.g. a malformed models.toml)."""
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - doctor reports problems, it does not stop at them
        return [(label, f"cannot check: {exc}")]


def _print_rich(rows: list[tuple[str, str]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="specchat doctor", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:  # file and model names: shown, not obeyed, and not markup
        table.add_row(escape(visible(key)), escape(visible(value)))
    Console().print(table)
