"""Loaded models plus everything needed to turn messages into an answer stream.

The one place where presets, the llama.cpp layer and the engine meet, shared by `ask`,
`chat` and `bench`. Tests build a Runtime directly from fake parts.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from specchat.cpushare import CpuShare
from specchat.engine.auto import AutoState
from specchat.engine.events import Event
from specchat.engine.loop import ProgressCallback, Restore, generate
from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import LogitsModel, common_prefix
from specchat.engine.stats import Stats
from specchat.engine.threads import ThreadGovernor
from specchat.errors import SpecchatError, UsageError
from specchat.llm.gpufit import FitPlan
from specchat.promptcache import PromptCache, StatefulModel
from specchat.tuning import (
    cached_flash_attn,
    gpu_key,
    measured_auto_state,
    plain_step_reference,
    thread_governor,
)

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
    gpu: str = ""  # what --n-gpu-layers auto chose, one line ("" when not asked or CPU only)
    gpu_layers: str = ""  # the same as "TARGET/DRAFT" n_gpu_layers values
    endpoint: str | None = None  # the server that answers, for --endpoint


class Backend(Protocol):
    """What the chat and `ask` need from whatever answers: local models (Runtime) or a remote
    server (specchat.remote.RemoteRuntime). Token ids, the context size and the KV cache are
    local-only, so they are optional here (None: unknown, the server enforces its own)."""

    @property
    def info(self) -> RuntimeInfo: ...

    @property
    def token_bytes(self) -> Callable[[int], bytes] | None: ...

    @property
    def chat_tokens(self) -> Callable[[Sequence[Message]], list[int]] | None:
        """Local models' chat template and tokenizer (None with n_ctx None)."""

    @property
    def n_ctx(self) -> int | None: ...

    def answer(self, messages: Sequence[Message], options: GenerationOptions,
               progress: ProgressCallback | None = None) -> Iterator[Event]:
        """The answer's events; `progress` hears how the prompt is read (local models)."""

    def complete(self, text: str, options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Iterator[Event]: ...

    def effective_options(self, options: GenerationOptions) -> GenerationOptions: ...

    def cached_tokens(self) -> int | None: ...

    def stats_lines(self, options: GenerationOptions) -> list[str]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: Any) -> None: ...


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
    governor: ThreadGovernor | None = None  # threads per step, learnt across answers
    cpu_share: CpuShare | None = None  # the other specchat processes decoding (with governor)

    def stream(self, prompt: Sequence[int], options: GenerationOptions,
               progress: ProgressCallback | None = None) -> Generator[Event, None, None]:
        """Generate an answer to `prompt` tokens; the mode comes from options.spec."""
        options = self.effective_options(options)
        draft = self.draft_for(options.spec)
        events = generate(self.target, prompt, options, draft=draft, auto=self.auto,
                          progress=progress, restore=self._restorer(draft),
                          governor=self.governor)
        if self.governor is None or self.cpu_share is None:
            return events
        return self._sharing_cores(events, self.governor, self.cpu_share)

    @staticmethod
    def _sharing_cores(events: Generator[Event, None, None], governor: ThreadGovernor,
                       share: CpuShare) -> Generator[Event, None, None]:
        """Counted among the specchat processes decoding while the answer runs, with this
        process's share of the cores from the first prefill batch on (cpushare.py)."""
        share.acquire()
        try:
            governor.set_limit(share.threads(governor.cores))
            yield from events
        finally:
            share.release()

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

    # --- the Backend interface (what the chat and ask use) -----------------------------
    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    @property
    def token_bytes(self) -> Callable[[int], bytes]:
        return self.target.token_bytes

    def answer(self, messages: Sequence[Message], options: GenerationOptions,
               progress: ProgressCallback | None = None) -> Iterator[Event]:
        return self.stream(self.fitting(self.chat_tokens(messages)), options, progress=progress)

    def complete(self, text: str, options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Iterator[Event]:
        return self.stream(self.fitting(self.raw_tokens(text)), options, progress=progress)

    def fitting(self, tokens: list[int]) -> list[int]:
        """The tokens, or a usage error when they leave no room in the context."""
        n_ctx = self.target.n_ctx
        if len(tokens) >= n_ctx:
            over = len(tokens) - n_ctx + 1
            raise UsageError(f"prompt is {len(tokens)} tokens, {over} over what a context of "
                             f"{n_ctx} leaves for an answer: raise --ctx or shorten the prompt")
        return tokens

    def cached_tokens(self) -> int | None:
        return len(self.target.tokens)

    def stats_lines(self, options: GenerationOptions) -> list[str]:
        from specchat.report import auto_lines

        return auto_lines(self.auto, self.draft is not None) if options.spec == "auto" else []

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
    n_ctx: int = 4096  # 0: the target's trained context
    n_gpu_layers: int | None = None  # None: auto (gpu_layers); -1: every layer
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
    layers, fit = gpu_layers(settings, target_path, draft_path)
    loaded = _loaded_models(reuse)
    closers: list[Callable[[], None]] = []

    def load(path: Path, n_ctx: int, n_gpu_layers: int, flash_attn: bool | None = None) -> Any:
        if str(path) in loaded:
            return loaded[str(path)]
        model = load_model(path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers,
                           n_threads=settings.threads, verbose=settings.verbose,
                           flash_attn=flash_attn)
        closers.append(model.close)
        return model

    target = load(target_path, settings.n_ctx, layers[0],
                  cached_flash_attn(target_path, settings,
                                    gpu_key(layers, fit)))
    draft = None
    try:
        if draft_path is not None:
            # target.n_ctx, not settings.n_ctx: --ctx 0 resolved to the target's trained one.
            draft = load(draft_path, target.n_ctx, layers[1])
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
        gpu=fit.summary() if fit is not None else "",
        gpu_layers=gpu_key(layers, fit),
    )
    if template.is_fallback and not settings.quiet:
        print(f"specchat: note: {template.note}", file=sys.stderr)
    runtime = Runtime(
        target=target, draft=draft,
        chat_tokens=lambda messages: chat_tokens(target, template, list(messages)),
        # --raw sends the text verbatim, control tokens included: it is how to write a
        # prompt in the model's own format (documented in `ask --raw --help` and README).
        raw_tokens=lambda text: target.tokenize(text, add_special=True, parse_special=True),
        info=info, speculation_allowed=not target.is_recurrent, closers=closers,
        settings=settings,
    )
    if settings.spec == "auto" and runtime.speculation_allowed:
        try:
            runtime.auto = measured_auto_state(runtime, settings)
        except BaseException:
            runtime.close()  # only what was loaded here: reused models stay with their owner
            raise
    share = CpuShare()
    runtime.governor = thread_governor([target, draft], settings,
                                       lambda: plain_step_reference(runtime, settings), share)
    runtime.cpu_share = share if runtime.governor is not None else None
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


def gpu_layers(settings: LoadSettings, target: Path,
               draft: Path | None) -> tuple[tuple[int, int], FitPlan | None]:
    """n_gpu_layers for (target, draft): the user's number, else what fits (llm.gpufit).

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


def fit_plan(target: Path, draft: Path | None, n_ctx: int) -> FitPlan | None:
    """The GPU placement for these files at n_ctx (0: trained), None without GPU memory info."""
    from specchat.llm import gpu_devices, read_model_shape
    from specchat.llm.gpufit import plan

    devices = gpu_devices()
    if not devices:
        return None
    shape = read_model_shape(target)
    draft_shape = read_model_shape(draft) if draft is not None else None
    return plan(devices, shape, draft_shape, n_ctx=n_ctx or shape.n_ctx_train)


def describe_gpu_fit(model: str | None = None, n_ctx: int = 4096) -> str:
    """What --n-gpu-layers auto would choose for `model` (default target) and its default
    draft, from files already downloaded; one line for `specchat doctor`."""
    from specchat.llm import gpu_offload_supported
    from specchat.models import DEFAULT_TARGET, default_draft_for, resolve_model

    if not gpu_offload_supported():
        return "0 layers: this llama.cpp build has no GPU backend (CPU only)"
    spec = model or DEFAULT_TARGET
    target = resolve_model(spec, pull=False, quiet=True)
    draft_spec = default_draft_for(spec)
    draft = None
    if draft_spec:
        try:
            draft = resolve_model(draft_spec, pull=False, quiet=True)
        except SpecchatError:
            draft = None  # not downloaded: size the target alone
    fit = fit_plan(target, draft, n_ctx)
    if fit is None:
        return "every layer: the GPU backend reports no free memory to size against"
    return f"{spec} at --ctx {n_ctx}: {fit.shortfall() or fit.summary()}"
