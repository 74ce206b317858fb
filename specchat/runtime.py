"""Loaded models plus everything needed to turn messages into an answer stream.

The one place where presets, the llama.cpp layer and the engine meet, shared by `ask`,
`chat` and `bench`. Tests build a Runtime directly from fake parts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from specchat.engine.auto import AutoState
from specchat.engine.events import Event
from specchat.engine.loop import generate
from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import LogitsModel
from specchat.errors import UsageError

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

    def answer(self, messages: Sequence[Message], options: GenerationOptions
               ) -> Iterator[Event]: ...

    def complete(self, text: str, options: GenerationOptions) -> Iterator[Event]: ...

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

    def stream(self, prompt: Sequence[int], options: GenerationOptions
               ) -> Generator[Event, None, None]:
        """Generate an answer to `prompt` tokens; the mode comes from options.spec."""
        options = self.effective_options(options)
        draft = self.draft if options.spec in ("draft", "auto") else None
        return generate(self.target, prompt, options, draft=draft, auto=self.auto)

    # --- the Backend interface (what the chat and ask use) -----------------------------
    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    @property
    def token_bytes(self) -> Callable[[int], bytes]:
        return self.target.token_bytes

    def answer(self, messages: Sequence[Message], options: GenerationOptions
               ) -> Iterator[Event]:
        return self.stream(self.fitting(self.chat_tokens(messages)), options)

    def complete(self, text: str, options: GenerationOptions) -> Iterator[Event]:
        return self.stream(self.fitting(self.raw_tokens(text)), options)

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
                        n_threads=settings.threads, verbose=settings.verbose)
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
    return runtime


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
