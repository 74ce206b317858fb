"""Local models answering: a target (and maybe a draft) plus what turns messages into an answer
stream (the chat template, the prompt cache, CPU sharing). Loading and switching models is
loading.py; tests build a Runtime directly from fake parts.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.backend.base import (
    KEEP,
    Backend,
    Events,
    Message,
    ProgressCallback,
    RuntimeInfo,
)
from specchat.backend.clients import Client, Clients, DraftSource
from specchat.backend.cpushare import CpuShare
from specchat.backend.draftstore import (
    MAX_PROMPT,
    DraftStore,
    open_store,
    record_start,
    tag_of,
)
from specchat.backend.promptcache import PromptCache, StatefulModel, keeps_states
from specchat.backend.structured import Guides, uses_tools, with_format_note
from specchat.backend.threads import ThreadGovernor
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks, generate
from specchat.engine.constraint import Constraint
from specchat.engine.events import Event, Finished
from specchat.engine.loop import Restore
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import StepListener, each_step
from specchat.engine.protocol import LogitsModel, common_prefix
from specchat.engine.stats import Stats
from specchat.engine.textdraft import TextVocabs
from specchat.errors import PromptTooLong, UsageError
from specchat.fileio import FileIOError
from specchat.llm.tools import ToolSet
from specchat.settings.load import LoadSettings

if TYPE_CHECKING:
    from specchat.backend.tuning import Tuned

# Positions make_room leaves beyond the prompt, the answer's first room and one draft: a tree
# of candidates holds a few more cells than its longest branch.
ROOM_MARGIN = 64
TEMPLATE_ROOM = 512  # bytes a chat template adds around the messages, in positions_for
# Answer tokens a context is first made with room for: a longer answer widens it as it goes
# (LlamaModel.eval, to at least twice its size), and most answers are shorter. Making the
# room for --max-tokens (1,024) at once cost ~120 ms more on every short answer here.
FIRST_ANSWER = 256


def positions_for(texts: Sequence[str], options: GenerationOptions) -> int:
    """Context positions a prompt of these texts and its answer's first room need at most,
    known before a model loads: a token stands for a byte of text or more, and a chat
    template adds less than TEMPLATE_ROOM bytes (where one adds more, make_room widens the
    context after tokenizing). For LoadSettings.ctx_start: a context is as slow to make as
    it is long."""
    prompt = sum(len(t.encode("utf-8", errors="replace")) for t in texts) + TEMPLATE_ROOM
    return prompt + answer_room(options)


def answer_room(options: GenerationOptions) -> int:
    """Positions beyond the prompt a context is made or widened with before an answer."""
    return min(options.max_tokens, FIRST_ANSWER) + options.draft_max + ROOM_MARGIN


@dataclass
class Runtime(Backend):
    """A target (and maybe a draft) ready to answer; engine calls go through here."""

    target: LogitsModel
    draft: LogitsModel | None
    chat_tokens: Callable[[Sequence[Message]], list[int]]
    raw_tokens: Callable[[str], list[int]]  # --raw: special-token text becomes those tokens
    info: RuntimeInfo
    # A lower bound on a prompt's tokens (chat messages, or raw text) found without
    # tokenizing it, so an over-long prompt is refused in time linear in its size.
    least_tokens: Callable[[Sequence[Message] | str], int] = lambda prompt: 0
    speculation_allowed: bool = True
    closers: list[Callable[[], None]] = field(default_factory=list)
    auto: AutoState = field(default_factory=AutoState)  # learnt across answers
    settings: LoadSettings | None = None  # how it was opened (None: built by hand, fixed)
    prompt_cache: PromptCache | None = None  # on-disk prompt states; one-shot commands only
    governor: ThreadGovernor | None = None  # threads per step, learnt across answers
    cpu_share: CpuShare | None = None  # the other specchat processes decoding (with governor)
    steps_heard: StepListener | None = None  # whether steps had their cores (QuietSteps)
    # Opens a runtime from settings, reusing this one's models (loading.open_runtime): what
    # switch() calls. None: built by hand, cannot switch.
    reopen: Callable[[LoadSettings, Runtime], Runtime] | None = None
    tuned: Tuned | None = None  # the loaded models as tuning measured them (open_runtime)
    store: DraftSource | None = None  # the drafting store: earlier prompts and answers
    clients: Clients | None = None  # a server's clients, each drafting apart (clients.py)
    # Prompts with tools and grammars for structured answers (None: free text only)
    guides: Guides | None = None
    # The draft's vocabulary is not the target's: it drafts text (engine/textdraft.py)
    vocabs: TextVocabs | None = None

    # --- the answer path ---------------------------------------------------------------
    def stream(self, prompt: Sequence[int], options: GenerationOptions,
               progress: ProgressCallback | None = None, tools: ToolSet | None = None
               ) -> Events:
        """Generate an answer to `prompt` tokens; the mode comes from options.spec, the
        grammar from options.structure or the tool choice."""
        options = self.effective_options(options)
        self.make_room(len(prompt), options)
        draft = self.draft_for(options.spec)
        store_index = None
        if self.store is not None and options.spec is Spec.AUTO:
            store_index = self.store.index(self.target.n_vocab)
        on_step = each_step(None if self.governor is None else self.governor.step_listener(
            self.auto.target_costs), self.steps_heard)
        hooks = Hooks(auto=self.auto, progress=progress, restore=self._restorer(draft),
                      on_step=on_step, store=store_index,
                      constraint=self._constraint(options, tools), vocabs=self.vocabs)
        events = generate(self.target, prompt, options, draft=draft, hooks=hooks)
        if self.governor is None or self.cpu_share is None:
            return events
        return self._sharing_cores(events, self.governor, self.cpu_share)

    def kept(self, events: Events, head: Sequence[int]) -> Events:
        """An answer's events; once it is complete (not interrupted), `head` (the part of
        its prompt worth keeping) and the answer go to the drafting store."""
        if self.store is None or not self.store.writable:
            return events
        return self._recording(events, self.store, list(head))

    @staticmethod
    def _recording(events: Events, store: DraftSource, head: list[int]) -> Events:
        """The Finished event goes out before the record is written: writing never delays
        the answer. A store that cannot be written costs a note, never the answer."""
        for event in events:
            yield event
            if isinstance(event, Finished) and event.tokens:
                try:
                    store.append([*head, *event.tokens], tag_of(event.text))
                except FileIOError as exc:
                    print(f"specchat: note: the drafting store was not written: {exc}",
                          file=sys.stderr)

    def keep_clients_apart(self, root: Path | None, size: str) -> None:
        """Answer for_client() from each client's own store under `root` (None: no store)
        and `auto` state; the store this runtime opened (the owner's chats) is only read."""
        target, base = self.target, self.auto

        def own_store(name: str) -> DraftStore | None:
            if root is None:
                return None
            return open_store(target.n_vocab, target.eog_tokens, target.token_bytes,
                              enabled=True, size=size, private=False, root=root / name)

        def fresh_auto() -> AutoState:
            # The machine's prices, each client learning its own from its own steps: which
            # batch sizes a client's text makes is what a shared table would learn from.
            draft = base.draft_costs
            return AutoState(target_costs=base.target_costs.copy(),
                             draft_costs=draft.copy() if draft is not None else None)

        chats = self.store if isinstance(self.store, DraftStore) else None
        self.clients = Clients(own_store, fresh_auto, chats)

    def for_client(self, client: Client) -> Backend:
        if self.clients is None:
            return self
        store, auto, switched = self.clients.enter(client)
        if switched:  # the cache's prompt is another client's: reusing it would tell them
            for model in (self.target, self.draft):
                if model is not None:
                    model.truncate(0)
        return dataclasses.replace(self, store=store, auto=auto)

    def cancel_when(self, cancelled: Callable[[], bool] | None) -> None:
        for model in (self.target, self.draft):
            stop_when = getattr(model, "cancel_when", None)  # llama.cpp's models; fakes have none
            if stop_when is not None:
                stop_when(cancelled)

    @staticmethod
    def _sharing_cores(events: Generator[Event, None, None], governor: ThreadGovernor,
                       share: CpuShare) -> Events:
        """Counted among the specchat processes decoding while the answer runs, with this
        process's share of the cores from the first prefill batch on (cpushare.py)."""
        share.acquire()
        try:
            governor.set_limit(share.threads(governor.cores))
            yield from events
        finally:
            share.release()

    def _constraint(self, options: GenerationOptions,
                    tools: ToolSet | None) -> Constraint | None:
        if options.structure is None and (tools is None or not tools.callable):
            return None
        return self._guides().constraint(options.structure, tools)

    def _guides(self) -> Guides:
        if self.guides is None:
            raise UsageError(f"{self.info.target_name} cannot give structured answers here "
                             "(no grammar support for this model)")
        return self.guides

    def draft_for(self, mode: Spec) -> LogitsModel | None:
        """The draft model a mode uses (its cache is prefilled with the prompt)."""
        return self.draft if mode.uses_draft_model else None

    def _cached_models(self, draft: LogitsModel | None) -> list[StatefulModel]:
        if self.prompt_cache is None or not self.speculation_allowed:
            return []  # a recurrent state cannot be cut back to a shared prefix
        # Fakes in tests may have no saved states: only models that do take part.
        found: list[StatefulModel] = []
        # A draft of another vocabulary holds other tokens than the prompt's: not cached.
        for model in (self.target, None if self.vocabs is not None else draft):
            if keeps_states(model):
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
        for model in self._cached_models(self.draft_for(Spec(stats.mode))):
            if common_prefix(model.tokens, head) < len(head):
                continue  # interrupted before its prefill was complete
            model.truncate(len(head))
            cache.save(model, evaluated=stats.prompt_evaluated)

    def fitting(self, tokens: list[int]) -> list[int]:
        """The tokens, or PromptTooLong when they leave no room in the context."""
        if len(tokens) >= self.n_ctx:
            raise PromptTooLong(len(tokens), self.n_ctx)
        return tokens

    def refuse_certainly_long(self, prompt: Sequence[Message] | str) -> None:
        """PromptTooLong, before any tokenizing, for a prompt that cannot fit."""
        least = self.least_tokens(prompt)
        if least >= self.n_ctx:
            raise PromptTooLong(least, self.n_ctx, at_least=True)

    def make_room(self, prompt: int, options: GenerationOptions) -> None:
        """Contexts opened small (LoadSettings.ctx_start) widened, as far as --ctx allows,
        to hold a prompt of `prompt` tokens and the answer's first room (what their caches
        hold moves across), so that a prefill never widens part way. stream() calls it
        before every answer; a longer answer widens them as it goes."""
        need = prompt + answer_room(options)
        for model in (self.target, self.draft):
            widen = getattr(model, "widen", None)  # a model that cannot widen is full-size
            if widen is not None:
                widen(need)

    # --- Backend -------------------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        """The positions a prompt and its answer may fill (--ctx)."""
        return self.target.n_ctx

    @property
    def token_bytes(self) -> Callable[[int], bytes]:
        return self.target.token_bytes

    def prompt_tokens(self, messages: Sequence[Message]) -> list[int]:
        return self.chat_tokens(messages)

    def text_tokens(self, text: str) -> list[int]:
        return self.raw_tokens(text)

    def answer(self, messages: Sequence[Message], options: GenerationOptions,
               progress: ProgressCallback | None = None, tools: ToolSet | None = None
               ) -> Events:
        if not uses_tools(messages, tools):
            # (A conversation with tools is rendered in its own way, backend/structured.py:
            # it is measured when it is tokenized.)
            self.refuse_certainly_long(messages)
        tokens = self.fitting(self.chat_prompt(messages, options, tools))
        return self.kept(self.stream(tokens, options, progress=progress, tools=tools),
                         tokens[self.record_start(messages, tokens):])

    def chat_prompt(self, messages: Sequence[Message], options: GenerationOptions,
                    tools: ToolSet | None = None) -> list[int]:
        """The chat prompt for an answer: with the tools it may call, and a note on the
        format it must have (backend/structured.py says why)."""
        calls = tools is not None and bool(tools.callable)
        if not calls or (tools is not None and tools.choice == "auto"):
            messages = with_format_note(messages, options.structure, beside_tools=calls)
        if uses_tools(messages, tools):
            return self._guides().prompt(messages, tools or ToolSet(()))
        return self.chat_tokens(messages)

    def complete(self, prompt: str | Sequence[int], options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Events:
        if isinstance(prompt, str):
            self.refuse_certainly_long(prompt)
        tokens = self.fitting(self.raw_tokens(prompt) if isinstance(prompt, str) else
                              self._ids(prompt))
        return self.kept(self.stream(tokens, options, progress=progress),
                         tokens[self.record_start(None, tokens):])

    def record_start(self, messages: Sequence[Message] | None, tokens: Sequence[int]) -> int:
        """Where the part of this prompt that the drafting store keeps starts (messages
        None: a raw completion prompt, whose end is kept)."""
        if messages is None:
            return max(0, len(tokens) - MAX_PROMPT)
        return record_start(self.chat_tokens, messages, tokens)

    def _ids(self, prompt: Sequence[int]) -> list[int]:
        """A prompt given as token ids, each checked against the vocabulary."""
        n = self.target.n_vocab
        bad = next((t for t in prompt if not 0 <= t < n), None)
        if bad is not None:
            raise UsageError(f"prompt token {bad} is not in this model's vocabulary "
                             f"(ids 0 to {n - 1})", param="prompt")
        if not prompt:
            raise UsageError("the prompt has no tokens", param="prompt")
        return [int(t) for t in prompt]

    def cached_tokens(self) -> int:
        return len(self.target.tokens)

    def stats_lines(self, options: GenerationOptions) -> list[str]:
        from specchat.term.summary import auto_lines

        return auto_lines(self.auto, self.draft is not None) if options.spec is Spec.AUTO \
            else []

    def explain(self, stats: Stats) -> dict[str, Any] | None:
        return self.auto.explain() if stats.mode == Spec.AUTO else None

    def effective_options(self, options: GenerationOptions) -> GenerationOptions:
        """Check the mode against what is loaded; refuse what cannot be honoured."""
        bias = options.sampling.logit_bias
        if bias and bias[-1][0] >= self.target.n_vocab:  # ids are sorted
            raise UsageError(f"logit_bias names token {bias[-1][0]}, which is not in this "
                             f"model's vocabulary (ids 0 to {self.target.n_vocab - 1})",
                             param="logit_bias")
        if options.spec is Spec.DRAFT and self.draft is None:
            raise UsageError("--spec draft needs a draft model: pass --draft NAME_OR_PATH "
                             "(or use --spec ngram / auto)")
        if not self.speculation_allowed and options.spec is not Spec.OFF:
            if options.spec is Spec.AUTO:
                return options.with_values(spec=Spec.OFF)
            raise UsageError(f"{self.info.target_name} is a recurrent/hybrid model whose cache "
                             "cannot be cut back: speculation is off for it (use --spec off)")
        # An exact target computes verify rows like single steps only up to so many rows
        # (llm/exact.py): longer drafts could change what a greedy answer says. A sampled
        # answer has the target's distribution either way, so it keeps the cheaper batches.
        rows = getattr(self.target, "exact_rows", None)
        if rows is not None and options.sampling.greedy and options.draft_max > rows - 1:
            return options.with_values(draft_max=rows - 1)
        return options

    def switch(self, *, model: str | None = KEEP, draft: str | None = KEEP,
               spec: Spec | None = None) -> Runtime:
        """Models that stay loaded (same file) move to the new runtime with their KV cache,
        so a draft switch keeps the target's cached conversation. A new target without an
        explicit draft gets its own preset's default draft. If anything fails to resolve,
        load or match, the error propagates and this runtime is untouched."""
        if self.settings is None or self.reopen is None:
            raise UsageError("these models were not opened from settings and cannot be "
                             "switched")
        changes: dict[str, Any] = {}
        if model != KEEP:
            changes["model"] = model
        if draft != KEEP:
            changes["draft"] = draft
        if spec is not None:
            changes["spec"] = spec  # the mode now in use decides whether a draft is needed
        fresh = self.reopen(dataclasses.replace(self.settings, **changes), self)
        kept = (fresh.target, fresh.draft)
        for close in self.closers:
            owner = getattr(close, "__self__", None)
            if owner is not None and any(owner is m for m in kept):
                fresh.closers.append(close)  # the new runtime owns it now
            else:
                close()
        self.closers.clear()
        return fresh

    def chosen_models(self) -> dict[str, str | None]:
        if self.settings is None:
            return {}
        return {"model": self.settings.model, "draft": self.settings.draft}

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()
