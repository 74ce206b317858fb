"""Building an answer's draft policy from the options and what the caller lends: the one
place that knows every policy and drafter. engine/loop.py runs whatever policy it is given.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from specchat.engine.auto import AutoPolicy, AutoState
from specchat.engine.constraint import Constraint
from specchat.engine.drafters import Drafter, DraftModelDrafter, PromptLookupDrafter
from specchat.engine.events import Event
from specchat.engine.loop import LoopHooks, checked, generate_with
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.padding import check_vocab_sizes
from specchat.engine.policy import Adaptive, DraftPolicy, GuidedPolicy, Plain
from specchat.engine.protocol import LogitsModel, tree_branches
from specchat.engine.storedraft import StoreDrafter
from specchat.engine.suffix import SuffixIndex
from specchat.engine.textdraft import TextDrafter, TextVocabs

NGRAM_MAX_MATCH = 5  # longest n-gram the prompt-lookup index keeps


@dataclass(frozen=True)
class Hooks(LoopHooks):
    """What a caller lends one answer: what the loop calls back and feeds (LoopHooks), and
    what its draft policy is built from."""

    # What `auto` measured and learnt in earlier answers (costs, acceptance); without it
    # `auto` starts from cautious CPU defaults. Its verify costs are learnt in every mode.
    auto: AutoState | None = None
    # Earlier prompts and answers `auto` may draft from (engine/storedraft.py); None: none.
    store: SuffixIndex | None = None
    # The draft speaks another vocabulary: it drafts text, re-tokenized for the target
    # (engine/textdraft.py). None: the draft shares the target's vocabulary.
    vocabs: TextVocabs | None = None

    def __post_init__(self) -> None:
        # Every step teaches `auto`'s verify costs unless the caller lends a table of its own.
        if self.costs is None and self.auto is not None:
            object.__setattr__(self, "costs", self.auto.target_costs)


def generate(target: LogitsModel, prompt: Sequence[int], options: GenerationOptions, *,
             draft: LogitsModel | None = None,
             hooks: Hooks = Hooks()) -> Generator[Event, None, None]:
    """Stream the answer to `prompt` (token ids) with the policy options.spec names.

    Raises ValueError at once (not on first iteration) for an empty prompt, `spec="draft"`
    without a draft model, or a draft whose vocabulary size differs from the target's by
    more than the padding engine/padding.py can bridge.
    """
    tokens = checked(prompt)
    policy = make_policy(options, target, draft, hooks)
    return generate_with(target, tokens, options, policy, hooks)


def make_drafter(options: GenerationOptions, target: LogitsModel, draft: LogitsModel | None,
                 constraint: Constraint | None = None) -> Drafter | None:
    """The drafter options.spec drafts with (prompt lookup for `auto`); None for `off`. A
    draft model masks its rows with `constraint`, as the target's are."""
    if options.spec is Spec.OFF or options.draft_max == 0:
        return None
    if options.spec is Spec.DRAFT:
        if draft is None:
            raise ValueError("spec 'draft' needs a draft model; use 'ngram' or 'off' without one")
        return DraftModelDrafter(draft, options.sampling, target.n_vocab, constraint)
    if options.spec is Spec.AUTO and draft is not None:
        check_vocab_sizes(target.n_vocab, draft.n_vocab)
    min_match = options.draft_min_match
    return PromptLookupDrafter(min_match, max(min_match, NGRAM_MAX_MATCH))


def make_policy(options: GenerationOptions, target: LogitsModel, draft: LogitsModel | None,
                hooks: Hooks = Hooks()) -> DraftPolicy:
    """The policy options.spec names. Under a grammar drafts go through GuidedPolicy (a
    TextDrafter's unmasked). The store drafter times its lookups on the loop's clock, so
    priced replays repeat exactly."""
    auto, constraint, store, vocabs = hooks.auto, hooks.constraint, hooks.store, hooks.vocabs
    text = None if vocabs is None or draft is None or not options.spec.uses_draft_model \
        else TextDrafter(draft, vocabs)
    drafter: Drafter | None = text
    if text is None or options.spec is not Spec.DRAFT or options.draft_max == 0:
        drafter = make_drafter(options, target, draft if text is None else None, constraint)
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
        earlier = None if store is None or store.empty else StoreDrafter(
            store, state.model, state.target_costs, branches, hooks.clock, drafter.index)
        policy = AutoPolicy(state, drafter, model_drafter, options.draft_max, earlier)
    else:
        policy = Adaptive(drafter, options.draft_max)
    return policy if constraint is None else GuidedPolicy(policy, constraint)
