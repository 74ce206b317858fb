"""The decode loop: draft, verify in one target call, accept, commit, yield an event.

Cache invariant (the target). Between steps the target's cache holds the committed tokens
minus the last one: prompt + answer[:-1]. A step evaluates [last, d1..dk] in ONE eval call,
asking for all k+1 logits rows; row i is the target's next-token distribution after
last, d1..d_i. When n drafts and one new token are committed, the cache is cut back to the
new committed-minus-last, which is [..., last, d1..dn]: a prefix of what was just evaluated,
so no token is ever evaluated twice. The prefill therefore evaluates prompt[:-1]; the last
prompt token goes with the first step. The same cut runs in `finally`, whatever ended the
answer (normal end, an exception, the consumer closing the generator, Ctrl-C), so the cache
always holds a prefix of prompt + answer and the next turn's prefix reuse is safe.

Exactness does not depend on how k or the drafts are chosen: each emitted token has the
target's distribution given everything before it, whatever happened in earlier steps.
Under a grammar (Hooks.constraint) every row, the target's and the draft's, is masked for
its own position and drafts are cut at the first forbidden token: engine/constraint.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from specchat.engine.acceptance import accept_greedy, accept_sampled
from specchat.engine.auto import AutoPolicy, AutoState
from specchat.engine.constraint import Constraint, StepMasks
from specchat.engine.drafters import (
    EMPTY_DRAFT,
    Draft,
    Drafter,
    DraftModelDrafter,
    PromptLookupDrafter,
    fill_cache,
)
from specchat.engine.events import Chunk, Event, Finished, Progress
from specchat.engine.history import HistoryDrafter
from specchat.engine.logprobs import TokenLogprob, token_logprob
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.padding import check_vocab_sizes
from specchat.engine.policy import Adaptive, DraftPolicy, GuidedPolicy, Plain
from specchat.engine.protocol import (
    ContextFullError,
    LogitsModel,
    TreeModel,
    common_prefix,
    tree_branches,
)
from specchat.engine.sampling import biased, greedy_token, probs, recent_window
from specchat.engine.stats import Stats, StatsBuilder
from specchat.engine.suffix import SuffixIndex
from specchat.engine.text import TextStream
from specchat.engine.textdraft import TextDrafter, TextVocabs
from specchat.engine.threads import ThreadGovernor
from specchat.engine.tree import TreeDraft, accept_tree

Clock = Callable[[], float]
ProgressCallback = Callable[[Progress], None]
# Loads a saved state of (a prefix of) these tokens into the caches; returns how many tokens
# it put there (0: nothing usable). Called at the start of the prefill, inside its timing.
Restore = Callable[[Sequence[int]], int]

NGRAM_MAX_MATCH = 5  # longest n-gram the prompt-lookup index keeps


@dataclass(frozen=True)
class Hooks:
    """What a caller may lend one answer besides the models and the options."""

    # What `auto` measured and learnt in earlier answers (costs, acceptance); without it
    # `auto` starts from cautious CPU defaults. Verify costs are learnt in every mode.
    auto: AutoState | None = None
    progress: ProgressCallback | None = None  # hears how far the prefill is after each chunk
    restore: Restore | None = None  # may first load a saved prefix of the prompt
    governor: ThreadGovernor | None = None  # threads per step, from step times
    token_bytes: Callable[[int], bytes] | None = None  # default: the target's own
    clock: Clock = time.perf_counter
    # Earlier prompts and answers `auto` may draft from (engine/history.py); None: none.
    history: SuffixIndex | None = None
    # A grammar the answer must follow, fresh for this answer (None: free text)
    constraint: Constraint | None = None
    # The draft speaks another vocabulary: it drafts text, re-tokenized for the target
    # (engine/textdraft.py). None: the draft shares the target's vocabulary.
    vocabs: TextVocabs | None = None


def generate(target: LogitsModel, prompt: Sequence[int], options: GenerationOptions, *,
             draft: LogitsModel | None = None,
             hooks: Hooks = Hooks()) -> Generator[Event, None, None]:
    """Stream the answer to `prompt` (token ids) as Chunk events, then one Finished.

    Raises ValueError at once (not on first iteration) for an empty prompt, `spec="draft"`
    without a draft model, or a draft whose vocabulary size differs from the target's by
    more than the padding engine/padding.py can bridge.
    """
    tokens = _checked(prompt)
    policy = make_policy(options, target, draft, hooks.auto, hooks.constraint, hooks.history,
                         hooks.vocabs)
    return generate_with(target, tokens, options, policy, hooks)


def generate_with(target: LogitsModel, prompt: Sequence[int], options: GenerationOptions,
                  policy: DraftPolicy, hooks: Hooks = Hooks()) -> Generator[Event, None, None]:
    """The same loop with a draft policy of the caller's (priced replays run fixed and
    oracle policies through it); options.spec then only labels the statistics."""
    return _Run(target, _checked(prompt), options, policy, hooks).events()


def _checked(prompt: Sequence[int]) -> list[int]:
    tokens = [int(t) for t in prompt]
    if not tokens:
        raise ValueError("the prompt is empty: at least one token is needed")
    return tokens


def make_drafter(options: GenerationOptions, target: LogitsModel,
                 draft: LogitsModel | None) -> Drafter | None:
    """The drafter options.spec drafts with (prompt lookup for `auto`); None for `off`."""
    if options.spec is Spec.OFF or options.draft_max == 0:
        return None
    if options.spec is Spec.DRAFT:
        if draft is None:
            raise ValueError("spec 'draft' needs a draft model; use 'ngram' or 'off' without one")
        return DraftModelDrafter(draft, options.sampling, target.n_vocab)
    if options.spec is Spec.AUTO and draft is not None:
        check_vocab_sizes(target.n_vocab, draft.n_vocab)
    min_match = options.draft_min_match
    return PromptLookupDrafter(min_match, max(min_match, NGRAM_MAX_MATCH))


def make_policy(options: GenerationOptions, target: LogitsModel, draft: LogitsModel | None,
                auto: AutoState | None, constraint: Constraint | None = None,
                history: SuffixIndex | None = None,
                vocabs: TextVocabs | None = None) -> DraftPolicy:
    """Plain decoding for `off`; `draft` and `ngram` adapt k up to draft_max (a fixed long
    draft loses badly on CPUs whenever the text stops being predictable, docs/costs.md);
    `auto` chooses per step with measured costs. Under a grammar, the draft model masks its
    rows with it and drafts go through GuidedPolicy (engine/constraint.py). A draft of
    another vocabulary (`vocabs`) drafts text (TextDrafter), under a grammar unmasked."""
    text = None if vocabs is None or draft is None or not options.spec.uses_draft_model \
        else TextDrafter(draft, vocabs)
    drafter: Drafter | None = text
    if text is None or options.spec is not Spec.DRAFT or options.draft_max == 0:
        drafter = make_drafter(options, target, draft if text is None else None)
    if drafter is None:
        return Plain()
    policy: DraftPolicy
    if options.spec is Spec.AUTO and isinstance(drafter, PromptLookupDrafter):
        model_drafter = text or (DraftModelDrafter(draft, options.sampling, target.n_vocab,
                                                   constraint) if draft is not None else None)
        state = auto or AutoState()
        # A tree is verified without a grammar's masks or per-row logprobs: chains then.
        branches = 1 if constraint is not None or options.logprobs is not None else \
            tree_branches(target)
        earlier = None if history is None or history.empty else HistoryDrafter(
            history, state.model, branches)
        policy = AutoPolicy(state, drafter, model_drafter, options.draft_max, earlier)
    else:
        if isinstance(drafter, DraftModelDrafter):
            drafter.constraint = constraint
        policy = Adaptive(drafter, options.draft_max)
    return policy if constraint is None else GuidedPolicy(policy, constraint)


class _Run:
    """The state of one answer. Only `events()` is public: a generator with cleanup."""

    def __init__(self, target: LogitsModel, prompt: list[int], options: GenerationOptions,
                 policy: DraftPolicy, hooks: Hooks) -> None:
        self.target = target
        self.options = options
        self.policy = policy
        self.auto = hooks.auto
        self.progress = hooks.progress
        self.restore = hooks.restore
        self.governor = hooks.governor
        self.token_bytes = hooks.token_bytes or target.token_bytes
        self.clock = hooks.clock
        self.constraint = hooks.constraint
        self.logprobs: list[TokenLogprob] = []  # of the last step's tokens, when asked for
        self.committed = prompt  # prompt + answer so far
        self.n_prompt = len(prompt)
        self.rng = np.random.default_rng(options.sampling.seed)
        self.text = TextStream(options.stop)
        self.stats = StatsBuilder(mode=options.spec, prompt_tokens=len(prompt))
        self.decode_start = self.start = self.clock()

    def events(self) -> Generator[Event, None, None]:
        try:
            yield from self._decode()
        finally:
            self._restore()

    def _decode(self) -> Iterator[Event]:
        if not self._prefill():
            yield from self._finish("context")
            return
        while True:
            # A plain step evaluates one token at position len(committed) - 1.
            if len(self.committed) > self.target.n_ctx:
                yield from self._finish("context")
                return
            try:
                new, flags = self._step()
            except ContextFullError:  # the backend disagreed with our count: still no crash
                yield from self._finish("context")
                return
            kept, text, reason = self._commit(new)
            flags = flags[: len(kept)]
            if reason is not None:
                yield from self._finish(reason, text, kept, flags)
                return
            yield Chunk(text, tuple(kept), tuple(flags), self._snapshot(),
                        tuple(self.logprobs[: len(kept)]))

    def _prefill(self) -> bool:
        self.start = start = self.clock()
        prompt = self.committed
        if len(prompt) > self.target.n_ctx:
            return False
        if self.restore is not None:
            self.stats.prompt_restored = self.restore(prompt[:-1])
        report = None
        if self.progress is not None:
            tell = self.progress

            def report(done: int, total: int) -> None:
                tell(Progress(done, total, self.clock() - start))
        evaluated = fill_cache(self.target, prompt[:-1], progress=report)
        self.stats.prompt_cached = len(prompt) - 1 - evaluated
        self.policy.prepare(prompt)
        self.decode_start = self.clock()
        self.stats.prompt_seconds = self.decode_start - start
        return True

    def _step(self) -> tuple[list[int], list[bool]]:
        """One target call. Returns the accepted drafts plus the target's own token."""
        stats, committed = self.stats, self.committed
        room = self.target.n_ctx - len(committed)
        remaining = self.options.max_tokens - stats.generated
        # Drafts past max_tokens could never be emitted, so they are not even asked for.
        limit = max(0, min(self.options.draft_max, room, remaining - 1))
        t0 = self.clock()
        draft: Draft | TreeDraft = EMPTY_DRAFT
        if limit > 0:
            draft = self.policy.propose(committed, limit, self.rng)
            # A tree is as deep as `limit` at most; its width must still fit the context.
            draft = draft.cut(room if isinstance(draft, TreeDraft) else limit)
        stats.last_k = len(draft.tokens)
        t1 = self.clock()
        if isinstance(draft, TreeDraft):
            kept, token, t2 = self._verify_tree(draft)
        else:
            batch = [committed[-1], *draft.tokens]
            logits = self.target.eval(batch, list(range(len(batch))))
            t2 = self.clock()
            n, token = self._accept(logits, draft)
            kept = list(draft.tokens[:n])
            if self.options.logprobs is not None:
                top = self.options.logprobs
                self.logprobs = [token_logprob(logits[j], t, top)
                                 for j, t in enumerate([*kept, token])]
        n = len(kept)
        t3 = self.clock()
        stats.draft_seconds += t1 - t0
        stats.verify_seconds += t2 - t1
        stats.sample_seconds += t3 - t2
        stats.record_step(len(draft.tokens), n, seconds=t3 - t1, source=draft.source)
        if self.auto is not None:
            self.auto.target_costs.observe(len(draft.tokens) + 1, t2 - t1)
        if self.governor is not None:
            costs = self.auto.target_costs if self.auto is not None else None
            size = len(draft.tokens) + 1
            ratio = costs.cost(size) / costs.cost(1) if costs else float(size)
            self.governor.observe(t2 - t1, ratio)
        self.policy.observe(len(draft.tokens), n, draft_seconds=t1 - t0,
                            verify_seconds=t2 - t1)
        return [*kept, token], [True] * n + [False]

    def _verify_tree(self, draft: TreeDraft) -> tuple[list[int], int, float]:
        """Several candidates in one target call (engine/tree.py): the accepted path's
        tokens, the token after them, and when the target call ended."""
        # Only policies made for a TreeModel target propose trees (make_policy).
        target = cast(TreeModel, self.target)
        batch, parents = draft.batch(self.committed[-1])
        logits = target.eval_tree(batch, parents)
        t2 = self.clock()
        opts = self.options.sampling
        n_recent = opts.repeat_last_n if opts.repeat_penalty != 1.0 else 0
        base = self.committed[-n_recent:] if n_recent else []
        # logit_bias is a warp of the target's rows here as in a chain (no grammar: trees
        # are not drafted under one, make_policy).
        path, token = accept_tree(lambda i: biased(logits[i], opts), draft, base, opts,
                                  self.rng)
        target.keep_path([i + 1 for i in path])
        return draft.path_tokens(path), token, t2

    def _accept(self, logits: np.ndarray, draft: Draft) -> tuple[int, int]:
        opts = self.options.sampling
        d = draft.tokens
        n_recent = opts.repeat_last_n if opts.repeat_penalty != 1.0 else 0
        base = self.committed[-n_recent:] if n_recent else []

        # Row i is scored as if d1..d_i were already in the context: the penalty sees them,
        # and so does the grammar.
        def recent(i: int) -> list[int]:
            return recent_window(base, d[:i], n_recent)

        masks = StepMasks(self.constraint, d) if self.constraint is not None else None

        def row(i: int) -> np.ndarray:
            return biased(logits[i], opts, None if masks is None else masks(i))

        try:
            if opts.greedy:
                return accept_greedy(lambda i: greedy_token(row(i), recent(i), opts), d)
            return accept_sampled(lambda i: probs(row(i), recent(i), opts), d, draft.q,
                                  self.rng)
        finally:
            if masks is not None:
                masks.settle()

    def _commit(self, new: list[int]) -> tuple[list[int], str, str | None]:
        """Append tokens until one ends the answer; cut the caches back to match."""
        eog, max_tokens = self.target.eog_tokens, self.options.max_tokens
        kept: list[int] = []
        text = ""
        reason: str | None = None
        for token in new:
            self.committed.append(token)
            kept.append(token)
            self.stats.generated += 1
            if self.stats.generated == 1:
                self.stats.first_token_seconds = self.clock() - self.start
            if token in eog:
                reason = "eog"  # kept as an answer token, never rendered
                break
            text += self.text.push(self.token_bytes(token))
            if self.text.stopped:
                reason = "stop"
                break
            if self.stats.generated >= max_tokens:
                reason = "length"
                break
        if self.constraint is not None:
            self.constraint.advance(kept)
        self.target.truncate(len(self.committed) - 1)
        self.policy.rollback(self.committed)
        return kept, text, reason

    def _finish(self, reason: str, text: str = "", kept: Sequence[int] = (),
                flags: Sequence[bool] = ()) -> Iterator[Event]:
        # A cut answer never ends in half a character: its bytes are dropped, not shown as
        # U+FFFD (an answer the model ended keeps what it wrote).
        text += self.text.flush(complete=reason not in ("length", "context"))
        stats = self._snapshot()
        if kept or text:
            # The end-of-generation token is never shown, so it has no logprob entry either.
            shown = len(kept) - (reason == "eog")
            yield Chunk(text, tuple(kept), tuple(flags), stats, tuple(self.logprobs[:shown]))
        yield Finished(reason, self.text.text, tuple(self.committed[self.n_prompt:]), stats)

    def _snapshot(self) -> Stats:
        if self.auto is not None:
            self.stats.plain_step_seconds = self.auto.target_costs.cost(1)
        return self.stats.snapshot(self.clock() - self.decode_start)

    def _restore(self) -> None:
        """Leave the caches holding a prefix of committed (minus last, for the target)."""
        try:
            keep = common_prefix(self.target.tokens, self.committed[:-1])
            self.target.truncate(keep)
        finally:
            self.policy.reset(self.committed)
