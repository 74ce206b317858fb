"""Drafting from the drafting store (engine/storedraft.py) through `auto`, on fake models."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specchat.engine.auto import CPU_RATIOS, AutoPolicy, AutoState
from specchat.engine.build import Hooks, generate, make_policy
from specchat.engine.cost import AcceptanceModel, CostTable
from specchat.engine.drafters import STORE, Draft
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions
from specchat.engine.storedraft import StoreDrafter, store_prior
from specchat.engine.suffix import Segment, SuffixIndex
from specchat.engine.tree import TreeDraft
from tests.support.fakes import FakeModel, FakeTreeModel

GPU = CostTable.from_ratios(0.02, [1 + 0.03 * i for i in range(65)])
CPU = CostTable.from_ratios(0.04, CPU_RATIOS)
PROMPT = [1, 2, 3, 4, 5]


def fixed(table: CostTable) -> CostTable:
    return CostTable(list(table.seconds), learn=False)


def models() -> tuple[dict[object, AcceptanceModel], object]:
    found: dict[object, AcceptanceModel] = {}

    def model(key: object) -> AcceptanceModel:
        if key not in found:
            assert isinstance(key, tuple)
            found[key] = AcceptanceModel(store_prior(key[1], key[2]))
        return found[key]
    return found, model


def greedy_answer(target: FakeModel, prompt: Sequence[int], n: int) -> list[int]:
    *_, fin = generate(target, prompt, GenerationOptions(max_tokens=n, spec="off"))
    assert isinstance(fin, Finished)
    return list(fin.tokens)


def test_a_long_agreed_continuation_is_drafted_as_a_chain_on_a_cpu() -> None:
    answer = list(range(10, 40))
    store = SuffixIndex([Segment.of_records([[*PROMPT, *answer]] * 3)], n_vocab=50)
    _, model = models()
    drafter = StoreDrafter(store, model, CPU, branches=1)
    plan = drafter.propose([9, *PROMPT, *answer[:6]], 16)
    assert plan.tokens and isinstance(plan, Draft)
    assert plan.source == STORE
    assert list(plan.tokens) == answer[6: 6 + len(plan.tokens)]
    assert plan.expected_speedup is not None and plan.expected_speedup > 1.0


def test_competing_continuations_become_branches_where_batches_are_cheap() -> None:
    store = SuffixIndex([Segment.of_records([[*PROMPT, 20, 21, 22], [*PROMPT, 30, 31, 32],
                                             [*PROMPT, 20, 21, 23]])], n_vocab=50)
    _, model = models()
    tree_plan = StoreDrafter(store, model, GPU, branches=8).propose([*PROMPT], 16)
    assert tree_plan.tokens and isinstance(tree_plan, TreeDraft)
    assert {tree_plan.tokens[i] for i in tree_plan.children(-1)} == {20, 30}
    # Depth first, likeliest first: 20 (two occurrences) and its subtree come before 30.
    assert tree_plan.tokens[0] == 20
    assert tree_plan.parents.index(-1, 1) > 1
    chain_plan = StoreDrafter(store, model, GPU, branches=1).propose([*PROMPT], 16)
    assert chain_plan.tokens and isinstance(chain_plan, Draft)
    none_on_cpu = StoreDrafter(store, model, CPU, branches=8).propose([*PROMPT], 16)
    assert not none_on_cpu.tokens  # contested single occurrences never pay on a CPU


def test_the_depth_limit_holds() -> None:
    store = SuffixIndex([Segment.of_records([[*PROMPT, *range(10, 40)]] * 3)], n_vocab=50)
    _, model = models()
    plan = StoreDrafter(store, model, GPU, branches=8).propose([*PROMPT], 3)
    assert plan.tokens and plan.depth <= 3 and len(plan.tokens) <= 3


def test_every_candidate_is_scored_against_what_the_target_wrote() -> None:
    store = SuffixIndex([Segment.of_records([[*PROMPT, 20, 21], [*PROMPT, 30, 31]])],
                        n_vocab=50)
    found, model = models()
    drafter = StoreDrafter(store, model, GPU, branches=1)
    drafter.propose([*PROMPT], 16)  # candidates 20 and 30, drafted or not
    drafter.observe([*PROMPT, 30, 31])
    trials = {k: m.trials[0] for k, m in found.items() if m.trials[0]}
    hits = {k: m.hits[0] for k, m in found.items() if m.hits[0]}
    # 20 and 30 at the root, then 31 under 30 (each observation fades older ones by 2%).
    assert sum(trials.values()) == pytest.approx(3, abs=0.05)
    assert sum(hits.values()) == pytest.approx(2, abs=0.05)


def test_misses_lower_what_the_drafter_expects_within_an_answer() -> None:
    records = [[*PROMPT, *range(10 + i, 30 + i)] for i in range(0, 40, 20)]
    store = SuffixIndex([Segment.of_records(records)], n_vocab=100)
    _, model = models()
    drafter = StoreDrafter(store, model, GPU, branches=1)
    first = drafter.propose([0, 1, 12, 13, 14], 8)
    assert first.tokens and first.expected_speedup is not None
    for _ in range(6):  # the target keeps writing something else after the same match
        drafter.propose([0, 1, 12, 13, 14], 8)
        drafter.observe([0, 1, 12, 13, 14, 99, 98])
    later = drafter.propose([0, 1, 12, 13, 14], 8)
    assert not later.tokens or (later.expected_speedup or 0.0) < first.expected_speedup


def run_auto(target: FakeModel, prompt: Sequence[int], store: SuffixIndex | None,
             n: int = 40, costs: CostTable = GPU) -> Finished:
    state = AutoState(target_costs=fixed(costs))
    *_, fin = generate(target, prompt, GenerationOptions(max_tokens=n),
                       hooks=Hooks(auto=state, store=store))
    assert isinstance(fin, Finished)
    return fin


def test_greedy_answers_with_a_store_equal_plain_greedy_and_use_it() -> None:
    target = FakeTreeModel(12, seed=4)
    prompt = [3, 1, 4, 1, 5]
    answer = greedy_answer(FakeModel(12, seed=4), prompt, 40)
    # The store holds this very answer once, and a corrupted copy: drafts are tried,
    # most hold, some branches fail, the answer never changes.
    wrong = [(t + 1) % 12 if i % 7 == 3 else t for i, t in enumerate(answer)]
    store = SuffixIndex([Segment.of_records([[*prompt, *answer], [*prompt, *wrong]])], 12)
    for costs in (GPU, CPU):
        fin = run_auto(FakeTreeModel(12, seed=4), prompt, store, costs=costs)
        assert list(fin.tokens) == answer
        sources = fin.stats.to_dict()["sources"]
        assert sources[STORE]["accepted"] > 0
    assert run_auto(target, prompt, None).stats.to_dict()["sources"].get(STORE) is None


def test_a_store_of_foreign_or_hostile_tokens_changes_nothing() -> None:
    prompt = [3, 1, 4, 1, 5]
    answer = greedy_answer(FakeModel(12, seed=6), prompt, 30)
    rng = np.random.default_rng(0)
    noise = [[int(t) for t in rng.integers(0, 2**31, size=50)] for _ in range(5)]
    store = SuffixIndex([Segment.of_records([*noise, [*prompt, *rng.integers(0, 12, 40)]])],
                        12)
    fin = run_auto(FakeTreeModel(12, seed=6), prompt, store, n=30)
    assert list(fin.tokens) == answer


def test_learnt_store_acceptance_survives_export_and_import() -> None:
    state = AutoState()
    state.model(("store", 3, 4)).observe(1, 1)
    fresh = AutoState()
    assert fresh.import_acceptance(state.export_acceptance()) == 1
    assert fresh.models[("store", 3, 4)].hits[0] > 0
    bad = {'["store", 9, 0]': {"hits": [0.0] * 17, "trials": [0.0] * 17},
           '["store", "3", 0]': {"hits": [0.0] * 17, "trials": [0.0] * 17}}
    assert AutoState().import_acceptance(bad) == 0


def test_counts_saved_under_the_drafters_old_names_are_read_under_the_new() -> None:
    counts = {"hits": [1.0] + [0.0] * 16, "trials": [2.0] + [0.0] * 16}
    saved = {'["history", 3, 4]': counts, '["prompt", 2, 0]': counts,
             '["draft-model", 1]': counts}
    state = AutoState()
    assert state.import_acceptance(saved) == 3
    for key in (("store", 3, 4), ("ngram", 2, 0), ("draft", 1)):
        assert state.models[key].hits[0] == 1.0 and state.models[key].trials[0] == 2.0
    assert "history" not in "".join(state.explain()["store_estimates"])


def test_copies_of_one_text_are_one_piece_of_evidence() -> None:
    """A schema repeated in every stored request does not make its continuation look
    supported by every record."""
    schema = list(range(40, 80))
    records = [[1, 2, *schema, 90 + i] for i in range(4)]  # one schema, different questions
    store = SuffixIndex([Segment.of_records(records)], n_vocab=100)
    drafter = StoreDrafter(store, models()[1], CPU, branches=1)
    drafter.propose([1, 2, 40, 41, 42], 16)
    assert drafter._shadow is not None
    tree = drafter._shadow.tree
    first = int(np.flatnonzero(tree.parent == -1)[0])
    assert tree.count[first] == 1  # four copies, one occurrence


def test_a_value_an_earlier_answer_copied_from_its_request_is_not_proposed() -> None:
    # Earlier request: "id 77 ..." answered "{ id : 77 }"; this request says "id 31".
    earlier = [5, 6, 77, 78, 9, 1, 2, 6, 3, 77, 78, 4]
    store = SuffixIndex([Segment.of_records([earlier])], n_vocab=100)
    drafter = StoreDrafter(store, models()[1], GPU, branches=1)
    plan = drafter.propose([5, 6, 31, 32, 9, 1, 2, 6, 3], 16)
    assert plan.tokens[:1] != (77,)
    drafter = StoreDrafter(store, models()[1], GPU, branches=1)
    same_value = drafter.propose([5, 6, 77, 78, 9, 1, 2, 6, 3], 16)
    assert same_value.tokens[:2] == (77, 78)


def _guided(target: FakeModel, prompt: Sequence[int], store: SuffixIndex | None,
            spec: str, **opts: object) -> Finished:
    from tests.support.fakegrammar import FakeGrammar

    # Everything but 7 and 9, so the store's copies (which hold both) are cut by the grammar.
    grammar = FakeGrammar({0: {t: 0 for t in range(12) if t not in (7, 9)}}, 12)
    state = AutoState(target_costs=fixed(GPU))
    *_, fin = generate(target, prompt, GenerationOptions(max_tokens=40, spec=spec, **opts),
                       hooks=Hooks(auto=state, store=store, constraint=grammar))
    assert isinstance(fin, Finished)
    return fin


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}])
def test_under_a_grammar_store_drafts_are_chains_and_change_nothing(
        extra: dict[str, object]) -> None:
    """Trees are verified without a grammar's masks and per-row logprobs, so under either the
    store drafts chains, which go through the grammar like any draft."""
    prompt = [3, 1, 4, 1, 5]
    plain = _guided(FakeTreeModel(12, seed=4), prompt, None, "off", **extra)
    assert not {7, 9} & set(plain.tokens)
    free = greedy_answer(FakeModel(12, seed=4), prompt, 40)
    wrong = [(t + 1) % 12 if i % 5 == 2 else t for i, t in enumerate(plain.tokens)]
    store = SuffixIndex([Segment.of_records([[*prompt, *plain.tokens], [*prompt, *wrong],
                                             [*prompt, *free]])], 12)
    target = FakeTreeModel(12, seed=4)
    fin = _guided(target, prompt, store, "auto", **extra)
    assert list(fin.tokens) == list(plain.tokens)
    assert fin.stats.to_dict()["sources"][STORE]["accepted"] > 0
    assert target.tree_calls == []


def test_the_store_drafter_times_its_lookups_on_the_loops_clock() -> None:
    """A priced replay's clock stands still while nothing is charged: the store's lookups
    cost nothing on it, so a replay with the store repeats exactly (benchmarks/
    session_replay.py)."""
    answer = list(range(10, 40))
    store = SuffixIndex([Segment.of_records([[*PROMPT, *answer]] * 3)], n_vocab=50)
    hooks = Hooks(auto=AutoState(target_costs=fixed(GPU)), store=store, clock=lambda: 7.0)
    policy = make_policy(GenerationOptions(spec="auto"), FakeModel(50), None, hooks)
    assert isinstance(policy, AutoPolicy) and policy.store is not None
    for n in range(3, 20):
        policy.propose([9, *PROMPT, *answer[:n]], 8, np.random.default_rng(0))
    assert policy.store.lookup_seconds == 0.0
    # Shared with prompt lookup: one index of the context.
    assert policy.store.context is policy.ngram.index
