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
Under a grammar (LoopHooks.constraint) every row, the target's and the draft's, is masked for
its own position and drafts are cut at the first forbidden token: engine/constraint.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from specchat.engine.acceptance import accept_greedy, accept_sampled
from specchat.engine.constraint import Constraint, StepMasks
from specchat.engine.cost import CostTable
from specchat.engine.drafters import EMPTY_DRAFT, Draft, fill_cache
from specchat.engine.events import Chunk, Event, Finished, Progress
from specchat.engine.logprobs import TokenLogprob, token_logprob
from specchat.engine.options import GenerationOptions
from specchat.engine.policy import DraftPolicy, Step, StepListener
from specchat.engine.protocol import ContextFullError, LogitsModel, TreeModel, common_prefix
from specchat.engine.sampling import biased, greedy_token, probs, recent_window
from specchat.engine.stats import Stats
from specchat.engine.text import TextStream
from specchat.engine.tree import TreeDraft, accept_tree

Clock = Callable[[], float]
ProgressCallback = Callable[[Progress], None]
# Loads a saved state of (a prefix of) these tokens into the caches; returns how many tokens
# it put there (0: nothing usable). Called at the start of the prefill, inside its timing.
Restore = Callable[[Sequence[int]], int]


@dataclass(frozen=True)
class LoopHooks:
    """What a caller lends the loop for one answer besides the models, the options and the
    draft policy (engine/build.py's Hooks adds what the policy is built from)."""

    progress: ProgressCallback | None = None  # hears how far the prefill is after each chunk
    restore: Restore | None = None  # may first load a saved prefix of the prompt
    token_bytes: Callable[[int], bytes] | None = None  # default: the target's own
    clock: Clock = time.perf_counter
    constraint: Constraint | None = None  # a grammar, fresh for this answer (None: free text)
    # This machine's verify costs: every step's verify time teaches them, in every mode,
    # and the statistics price a plain step with them.
    costs: CostTable | None = None
    on_step: StepListener | None = None  # hears every step (the thread governor)


def generate_with(target: LogitsModel, prompt: Sequence[int], options: GenerationOptions,
                  policy: DraftPolicy, hooks: LoopHooks = LoopHooks()
                  ) -> Generator[Event, None, None]:
    """Stream the answer to `prompt` as Chunk events, then one Finished, drafting with
    `policy`. Raises ValueError at once for an empty prompt."""
    return _Run(target, checked(prompt), options, policy, hooks).events()


def checked(prompt: Sequence[int]) -> list[int]:
    tokens = [int(t) for t in prompt]
    if not tokens:
        raise ValueError("the prompt is empty: at least one token is needed")
    return tokens


class _Run:
    """The state of one answer. Only `events()` is public: a generator with cleanup."""

    def __init__(self, target: LogitsModel, prompt: list[int], options: GenerationOptions,
                 policy: DraftPolicy, hooks: LoopHooks) -> None:
        self.target = target
        self.options = options
        self.policy = policy
        self.hooks = hooks
        self.token_bytes = hooks.token_bytes or target.token_bytes
        self.clock = hooks.clock
        self.constraint = hooks.constraint
        self.logprobs: list[TokenLogprob] = []  # of the last step's tokens, when asked for
        self.committed = prompt  # prompt + answer so far
        self.n_prompt = len(prompt)
        self.rng = np.random.default_rng(options.sampling.seed)
        self.text = TextStream(options.stop)
        # Counts and times so far; `generated` is len(committed) - n_prompt, filled in
        # by _snapshot.
        self.stats = Stats(mode=options.spec, prompt_tokens=len(prompt))
        self.decode_start = self.start = self.clock()

    def events(self) -> Generator[Event, None, None]:
        try:
            yield from self._decode()
        finally:
            self._restore()

    def _decode(self) -> Iterator[Event]:
        fits = self._prefill()
        # A plain step evaluates one token at position len(committed) - 1.
        while fits and len(self.committed) <= self.target.n_ctx:
            try:
                new, flags = self._step()
            except ContextFullError:  # the backend disagreed with our count: still no crash
                break
            kept, text, reason = self._commit(new)
            flags = flags[: len(kept)]
            if reason is not None:
                yield from self._finish(reason, text, kept, flags)
                return
            yield Chunk(text, tuple(kept), tuple(flags), self._snapshot(),
                        tuple(self.logprobs[: len(kept)]))
        yield from self._finish("context")

    def _prefill(self) -> bool:
        self.start = start = self.clock()
        prompt = self.committed
        if len(prompt) > self.target.n_ctx:
            return False
        restored = 0 if self.hooks.restore is None else self.hooks.restore(prompt[:-1])
        report = None
        if self.hooks.progress is not None:
            tell = self.hooks.progress

            def report(done: int, total: int) -> None:
                tell(Progress(done, total, self.clock() - start))
        evaluated = fill_cache(self.target, prompt[:-1], progress=report)
        self.policy.prepare(prompt)
        self.decode_start = self.clock()
        self.stats = self.stats.but(prompt_restored=restored,
                                    prompt_cached=len(prompt) - 1 - evaluated,
                                    prompt_seconds=self.decode_start - start)
        return True

    def _step(self) -> tuple[list[int], list[bool]]:
        """One target call; the accepted drafts plus the target's own token."""
        t0 = self.clock()
        draft = self._draft()
        t1 = self.clock()
        # Set before the verify, which may find no room.
        self.stats = self.stats.but(last_k=len(draft.tokens))
        if isinstance(draft, TreeDraft):
            kept, token, t2 = self._verify_tree(draft)
        else:
            kept, token, t2 = self._verify_chain(draft)
        self._record(Step(len(draft.tokens), len(kept), draft.source, t1 - t0, t2 - t1),
                     self.clock() - t2)
        return [*kept, token], [True] * len(kept) + [False]

    def _draft(self) -> Draft | TreeDraft:
        """The policy's draft, cut to what the context and max_tokens leave room for."""
        room = self.target.n_ctx - len(self.committed)
        remaining = self.options.max_tokens - self._generated
        # Drafts past max_tokens could never be emitted, so they are not even asked for.
        limit = max(0, min(self.options.draft_max, room, remaining - 1))
        if limit == 0:
            return EMPTY_DRAFT
        draft = self.policy.propose(self.committed, limit, self.rng)
        # A tree is as deep as `limit` at most; its width must still fit the context.
        return draft.cut(room if isinstance(draft, TreeDraft) else limit)

    def _verify_chain(self, draft: Draft) -> tuple[list[int], int, float]:
        """The accepted drafts, the token after them, and when the target call ended."""
        opts = self.options.sampling
        d = draft.tokens
        logits = self.target.eval([self.committed[-1], *d], list(range(len(d) + 1)))
        t2 = self.clock()
        n_recent = opts.repeat_last_n if opts.repeat_penalty != 1.0 else 0

        # Row i is scored as if d1..d_i were already in the context: the penalty sees them,
        # and so does the grammar.
        def recent(i: int) -> list[int]:
            return recent_window(self.committed, d[:i], n_recent)

        masks = StepMasks(self.constraint, d) if self.constraint is not None else None

        def row(i: int) -> np.ndarray:
            return biased(logits[i], opts, None if masks is None else masks(i))

        try:
            if opts.greedy:
                n, token = accept_greedy(lambda i: greedy_token(row(i), recent(i), opts), d)
            else:
                n, token = accept_sampled(lambda i: probs(row(i), recent(i), opts), d,
                                          draft.q, self.rng)
        finally:
            if masks is not None:
                masks.settle()
        kept = list(d[:n])
        if self.options.logprobs is not None:
            top = self.options.logprobs
            self.logprobs = [token_logprob(logits[j], t, top)
                             for j, t in enumerate([*kept, token])]
        return kept, token, t2

    def _record(self, step: Step, sample_seconds: float) -> None:
        self.stats = self.stats.with_step(step.drafted, step.accepted, step.source,
                                          step.draft_seconds, step.verify_seconds,
                                          sample_seconds)
        if self.hooks.costs is not None:
            self.hooks.costs.observe(step.batch, step.verify_seconds)
        self.policy.observe(step)
        if self.hooks.on_step is not None:
            self.hooks.on_step(step)

    def _verify_tree(self, draft: TreeDraft) -> tuple[list[int], int, float]:
        """Several candidates in one target call (engine/tree.py): the accepted path's
        tokens, the token after them, and when the target call ended."""
        # Only policies made for a TreeModel target propose trees (engine/build.py).
        target = cast(TreeModel, self.target)
        batch, parents = draft.batch(self.committed[-1])
        logits = target.eval_tree(batch, parents)
        t2 = self.clock()
        opts = self.options.sampling
        # logit_bias is a warp of the target's rows here as in a chain (no grammar: trees
        # are not drafted under one: engine/build.py).
        path, token = accept_tree(lambda i: biased(logits[i], opts), draft, self.committed,
                                  opts, self.rng)
        target.keep_path([i + 1 for i in path])
        return draft.path_tokens(path), token, t2

    def _commit(self, new: list[int]) -> tuple[list[int], str, str | None]:
        """Append tokens until one ends the answer; cut the caches back to match."""
        eog, max_tokens = self.target.eog_tokens, self.options.max_tokens
        kept: list[int] = []
        text = ""
        reason: str | None = None
        for token in new:
            self.committed.append(token)
            kept.append(token)
            if self._generated == 1:
                self.stats = self.stats.but(first_token_seconds=self.clock() - self.start)
            if token in eog:
                reason = "eog"  # kept as an answer token, never rendered
                break
            text += self.text.push(self.token_bytes(token))
            if self.text.stopped:
                reason = "stop"
                break
            if self._generated >= max_tokens:
                reason = "length"
                break
        if self.constraint is not None:
            self.constraint.advance(kept)
        self.target.truncate(len(self.committed) - 1)
        self.policy.committed(self.committed)
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

    @property
    def _generated(self) -> int:
        return len(self.committed) - self.n_prompt

    def _snapshot(self) -> Stats:
        costs = self.hooks.costs
        return self.stats.but(plain_step_seconds=0.0 if costs is None else costs.cost(1),
                              generated=self._generated,
                              decode_seconds=self.clock() - self.decode_start)

    def _restore(self) -> None:
        """Leave the caches holding a prefix of committed (minus last, for the target)."""
        try:
            keep = common_prefix(self.target.tokens, self.committed[:-1])
            self.target.truncate(keep)
        finally:
            self.policy.reset(self.committed)
