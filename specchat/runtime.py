"""Loaded models plus everything needed to turn messages into an answer stream.

The one place where presets, the llama.cpp layer and the engine meet, shared by `ask`,
`chat` and `bench`. Tests build a Runtime directly from fake parts.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.engine.auto import AutoState
from specchat.engine.events import Event
from specchat.engine.loop import ProgressCallback, Restore, generate
from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import LogitsModel, common_prefix
from specchat.engine.stats import Stats
from specchat.errors import UsageError
from specchat.promptcache import PromptCache, StatefulModel

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
    settings: LoadSettings | None = None  # how it was opened (None: built by hand, fixed)
    prompt_cache: PromptCache | None = None  # on-disk prompt states; one-shot commands only

    def stream(self, prompt: Sequence[int], options: GenerationOptions,
               progress: ProgressCallback | None = None) -> Iterator[Event]:
        """Generate an answer to `prompt` tokens; the mode comes from options.spec."""
        options = self.effective_options(options)
        draft = self.draft_for(options.spec)
        return generate(self.target, prompt, options, draft=draft, auto=self.auto,
                        progress=progress, restore=self._restorer(draft))

    def draft_for(self, mode: str) -> LogitsModel | None:
        """The draft model a mode uses (its cache is prefilled with the prompt)."""
        return self.draft if mode in ("draft", "auto") else None

    def _cached_models(self, draft: LogitsModel | None) -> list[StatefulModel]:
        if self.prompt_cache is None or not self.speculation_allowed:
            return []  # a recurrent state cannot be cut back to a shared prefix
        found: list[StatefulModel] = []
        for model in (self.target, draft):
            if isinstance(model, StatefulModel):  # fakes in tests may have no saved states
                found.append(model)
        return found

    def _restorer(self, draft: LogitsModel | None) -> Restore | None:
        models, cache = self._cached_models(draft), self.prompt_cache
        if not models or cache is None:
            return None

        def restore(tokens: Sequence[int]) -> int:
            # The draft's prefill would otherwise cost a third of the target's.
            loaded = [cache.restore(model, tokens) for model in models]
            return loaded[0]
        return restore

    def remember_prompt(self, prompt: Sequence[int], stats: Stats) -> None:
        """Save the prompt's KV states (minus the last token, as the prefill leaves them) to
        the prompt cache, when its prefill did enough work to be worth keeping."""
        cache = self.prompt_cache
        if cache is None:
            return
        head = list(prompt[:-1])
        for model in self._cached_models(self.draft_for(stats.mode)):
            if common_prefix(model.tokens, head) < len(head):
                continue  # interrupted before its prefill was complete
            model.truncate(len(head))
            cache.save(model, evaluated=stats.prompt_evaluated)

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


def open_runtime(settings: LoadSettings, reuse: Runtime | None = None) -> Runtime:
    """Resolve (pulling on first use), load and check the target and draft models.

    A model file that `reuse` already has loaded (same path) is taken from it instead of
    being loaded again; switch_models() settles who closes it.
    """
    from specchat.llm import ChatTemplate, chat_tokens, check_compatible, load_model
    from specchat.models import DEFAULT_TARGET, resolve_model

    target_spec = settings.model or DEFAULT_TARGET
    draft_spec = wants_draft(settings)
    target_path = resolve_model(target_spec, quiet=settings.quiet)
    draft_path = resolve_model(draft_spec, quiet=settings.quiet) if draft_spec else None
    loaded = _loaded_models(reuse)
    closers: list[Callable[[], None]] = []

    def load(path: Path) -> Any:
        if str(path) in loaded:
            return loaded[str(path)]
        model = load_model(path, n_ctx=settings.n_ctx, n_gpu_layers=settings.n_gpu_layers,
                           n_threads=settings.threads, verbose=settings.verbose)
        closers.append(model.close)
        return model

    target = load(target_path)
    draft = None
    try:
        if draft_path is not None:
            draft = load(draft_path)
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
        settings=settings,
    )
    if settings.spec == "auto" and runtime.speculation_allowed:
        try:
            runtime.auto = measured_auto_state(runtime, settings)
        except BaseException:
            runtime.close()  # only what was loaded here: reused models stay with their owner
            raise
    return runtime


def _loaded_models(runtime: Runtime | None) -> dict[str, Any]:
    if runtime is None:
        return {}
    pairs = [(runtime.info.target_path, runtime.target), (runtime.info.draft_path,
                                                          runtime.draft)]
    return {path: model for path, model in pairs if path and model is not None}


KEEP = "\0keep"  # switch_models(): leave this one as it is


def switch_models(runtime: Runtime, *, model: str | None = KEEP,
                  draft: str | None = KEEP, spec: str | None = None) -> Runtime:
    """A runtime with another target and/or draft; `runtime` is closed only on success.

    Models that stay loaded (same file) move to the new runtime with their KV cache, so a
    draft switch keeps the target's cached conversation. A new target without an explicit
    draft gets its own preset's default draft. If anything fails to resolve, load or match,
    the error propagates and `runtime` is untouched.
    """
    if runtime.settings is None:
        raise UsageError("these models were not opened from settings and cannot be switched")
    changes: dict[str, Any] = {}
    if model != KEEP:
        changes["model"] = model
    if draft != KEEP:
        changes["draft"] = draft
    if spec is not None:
        changes["spec"] = spec  # the mode now in use decides whether a draft is needed
    fresh = open_runtime(dataclasses.replace(runtime.settings, **changes), reuse=runtime)
    kept = (fresh.target, fresh.draft)
    for close in runtime.closers:
        owner = getattr(close, "__self__", None)
        if owner is not None and any(owner is m for m in kept):
            fresh.closers.append(close)  # the new runtime owns it now
        else:
            close()
    runtime.closers.clear()
    return fresh


def measured_auto_state(runtime: Runtime, settings: LoadSettings,
                        force: bool = False) -> AutoState:
    """Cost tables for `auto`: from the calibration cache, else measured now (once)."""
    from specchat.calibration import DRAFT_SIZES, TARGET_SIZES, CalibrationCache, cost_table
    from specchat.models import cache_dir

    cache = CalibrationCache(cache_dir().parent / "calibration.json")
    knobs: dict[str, object] = {"n_gpu_layers": settings.n_gpu_layers,
                                "threads": settings.threads, "version": 1}

    def announce(name: str) -> None:
        if not settings.quiet:
            print(f"specchat: measuring what {name} costs on this machine (once; cached)",
                  file=sys.stderr)

    target = cost_table(runtime.target, Path(runtime.info.target_path), TARGET_SIZES, knobs,
                        cache, force=force, announce=announce)
    draft = None
    if runtime.draft is not None:
        draft = cost_table(runtime.draft, Path(runtime.info.draft_path or ""), DRAFT_SIZES,
                           knobs, cache, force=force, announce=announce)
    return AutoState(target_costs=target, draft_costs=draft)
