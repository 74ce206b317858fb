"""Loaded models plus everything needed to turn messages into an answer stream.

The one place where presets, the llama.cpp layer and the engine meet, shared by `ask`,
`chat` and `bench`. Tests build a Runtime directly from fake parts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.engine.auto import AutoState
from specchat.engine.events import Event
from specchat.engine.loop import generate
from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import LogitsModel
from specchat.engine.threads import ThreadGovernor
from specchat.errors import UsageError

if TYPE_CHECKING:
    from specchat.calibration import CalibrationCache

Message = dict[str, str]


@dataclass
class RuntimeInfo:
    """What /show and --json report about the loaded models."""

    target_name: str
    target_path: str = ""
    draft_name: str | None = None
    draft_path: str | None = None
    template_note: str = ""
    template_is_fallback: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class Runtime:
    """A target (and maybe a draft) ready to answer; engine calls go through here."""

    target: LogitsModel
    draft: LogitsModel | None
    chat_tokens: Callable[[Sequence[Message]], list[int]]
    raw_tokens: Callable[[str], list[int]]
    info: RuntimeInfo
    speculation_allowed: bool = True
    closers: list[Callable[[], None]] = field(default_factory=list)
    auto: AutoState = field(default_factory=AutoState)  # learnt across answers
    governor: ThreadGovernor | None = None  # threads per step, learnt across answers

    def stream(self, prompt: Sequence[int], options: GenerationOptions) -> Iterator[Event]:
        """Generate an answer to `prompt` tokens; the mode comes from options.spec."""
        options = self.effective_options(options)
        draft = self.draft if options.spec in ("draft", "auto") else None
        return generate(self.target, prompt, options, draft=draft, auto=self.auto,
                        governor=self.governor)

    def effective_options(self, options: GenerationOptions) -> GenerationOptions:
        """Check the mode against what is loaded; refuse what cannot be honoured."""
        if options.spec == "draft" and self.draft is None:
            raise UsageError("--spec draft needs a draft model: pass --draft NAME_OR_PATH "
                             "(or use --spec ngram / auto)")
        if not self.speculation_allowed and options.spec != "off":
            if options.spec == "auto":
                return options.with_values(spec="off")
            raise UsageError(f"{self.info.target_name} is a recurrent/hybrid model whose cache "
                             "cannot be rolled back: speculation is off for it (use --spec off)")
        return options

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass(frozen=True)
class LoadSettings:
    """How to find and load models (from CLI flags / env)."""

    model: str | None = None
    draft: str | None = None
    spec: str = "auto"
    n_ctx: int = 4096
    n_gpu_layers: int | None = None
    threads: int | None = None
    verbose: bool = False
    quiet: bool = False


def wants_draft(settings: LoadSettings) -> str | None:
    """Which draft to load: explicit, else the target preset's default (draft/auto modes only)."""
    from specchat.models import DEFAULT_TARGET, default_draft_for

    if settings.spec in ("off", "ngram"):
        return None
    if settings.draft:
        return None if settings.draft.lower() == "none" else settings.draft
    return default_draft_for(settings.model or DEFAULT_TARGET)


def open_runtime(settings: LoadSettings) -> Runtime:
    """Resolve (pulling on first use), load and check the target and draft models."""
    from specchat.llm import ChatTemplate, chat_tokens, check_compatible, load_model
    from specchat.models import DEFAULT_TARGET, resolve_model

    target_spec = settings.model or DEFAULT_TARGET
    draft_spec = wants_draft(settings)
    target_path = resolve_model(target_spec, quiet=settings.quiet)
    draft_path = resolve_model(draft_spec, quiet=settings.quiet) if draft_spec else None
    target = load_model(target_path, n_ctx=settings.n_ctx, n_gpu_layers=settings.n_gpu_layers,
                        n_threads=settings.threads, verbose=settings.verbose,
                        flash_attn=cached_flash_attn(target_path, settings))
    closers: list[Callable[[], None]] = [target.close]
    draft = None
    try:
        if draft_path is not None:
            draft = load_model(draft_path, n_ctx=settings.n_ctx,
                               n_gpu_layers=settings.n_gpu_layers,
                               n_threads=settings.threads, verbose=settings.verbose)
            closers.append(draft.close)
            check_compatible(target, draft)
        template = ChatTemplate.from_model(target)
    except BaseException:
        for close in reversed(closers):
            close()
        raise
    info = RuntimeInfo(
        target_name=target_spec, target_path=str(target_path),
        draft_name=draft_spec, draft_path=str(draft_path) if draft_path else None,
        template_note=template.note, template_is_fallback=template.is_fallback,
    )
    if template.is_fallback and not settings.quiet:
        print(f"specchat: note: {template.note}", file=sys.stderr)
    runtime = Runtime(
        target=target, draft=draft,
        chat_tokens=lambda messages: chat_tokens(target, template, list(messages)),
        raw_tokens=lambda text: target.tokenize(text, add_special=True, parse_special=False),
        info=info, speculation_allowed=not target.is_recurrent, closers=closers,
    )
    if settings.spec == "auto" and runtime.speculation_allowed:
        runtime.auto = measured_auto_state(runtime, settings)
    runtime.governor = thread_governor([target, draft], settings,
                                       lambda: plain_step_reference(runtime, settings))
    return runtime


def plain_step_reference(runtime: Runtime, settings: LoadSettings) -> float:
    """Seconds of a plain step on a quiet machine: from the calibration `auto` loaded, else
    the cached one, else the fastest of three single-token evals now (~0.1 s, not cached)."""
    from specchat.calibration import machine_key, measure

    if not runtime.speculation_allowed:
        return float("inf")  # a recurrent cache cannot be measured and put back
    if settings.spec == "auto":
        return runtime.auto.target_costs.cost(1)
    cache, knobs = _calibration_cache(settings)
    knobs["flash_attn"] = getattr(runtime.target, "flash_attn", None)  # as auto keys it
    table = cache.load(machine_key(Path(runtime.info.target_path), knobs))
    if table is not None:
        return table.cost(1)
    return measure(runtime.target, sizes=(1,), repeats=3)[1]


def thread_governor(models: Sequence[Any], settings: LoadSettings,
                    reference: Callable[[], float]) -> ThreadGovernor | None:
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
    return ThreadGovernor(threads, setters, reference())


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

    cache, knobs = _calibration_cache(settings)
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
    runtime.closers.insert(0, lambda: save_if_drifted(target, target_path, knobs, cache))
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


def cached_flash_attn(target_path: Path, settings: LoadSettings) -> bool | None:
    """Flash attention as measured best for this file here (None: not measured yet)."""
    from specchat.calibration import machine_key

    cache, knobs = _calibration_cache(settings)
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
    _, knobs = _calibration_cache(settings)
    result = choose_flash_attn(runtime.target)
    _save_quietly(cache, "flash-attn-" + machine_key(target_path, knobs), result)


def _save_quietly(cache: CalibrationCache, key: str, value: object) -> None:
    """Learnt state is worth keeping, not worth failing an answer over."""
    from specchat.storage import StorageError

    try:
        cache.save_entry(key, value)
    except StorageError:
        pass


def _calibration_cache(settings: LoadSettings) -> tuple[CalibrationCache, dict[str, object]]:
    """The calibration file and the load settings that key its tables."""
    from specchat.calibration import CalibrationCache
    from specchat.models import cache_dir

    knobs: dict[str, object] = {"n_gpu_layers": settings.n_gpu_layers,
                                "threads": settings.threads, "version": 1}
    return CalibrationCache(cache_dir().parent / "calibration.json"), knobs
