"""The one replay harness (specchat/bench/replay.py): a recorded answer through the engine's
own loop on stand-in models, priced; tree verification by the stand-in target; the per-step
oracle copying from further candidates (the drafting store's, in the session replays)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specchat.bench import profiles
from specchat.bench import recording as rec
from specchat.bench.oracle import oracle_policy
from specchat.bench.replay import Setup, run_answer
from specchat.bench.standins import PricedClock, Renumbered, TablePrices, TreeStandIn
from specchat.engine.build import Hooks
from specchat.engine.cost import CostTable
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import Plain
from specchat.errors import UsageError
from tests.support.recordings import EOG, gpu_profile

PROMPT = [1, 2, 3, 4]
ANSWER = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, EOG]


def tree_target(price: float = 0.0) -> tuple[TreeStandIn, Renumbered, PricedClock]:
    data = Renumbered.dense([1, 2, 3], [4, 5, 6], 8)  # 7 ends generation
    clock = PricedClock(overhead=price)
    table = CostTable.from_ratios(1.0, [1.0 + 0.1 * i for i in range(17)])
    target = TreeStandIn(data.answer, 3, data, TablePrices(table), clock, "target", branches=4)
    target.eval([1, 2], [-1])  # the prefill of prompt[:-1]
    return target, data, clock


def test_a_tree_stand_in_follows_the_answer_only_along_it() -> None:
    target, _, clock = tree_target(price=0.5)
    before = clock.now
    # Rows: 3 (the last prompt token), then 4 and 9 as its children, then 5 under 4.
    rows = target.eval_tree([3, 4, 6, 5], [-1, 0, 0, 1])
    assert [int(r.argmax()) for r in rows] == [4, 5, 7, 6]  # 7: a row off the answer
    assert clock.now - before == pytest.approx(1.3 + 0.5)  # one batch of 4, one overhead
    assert target.tokens == (1, 2, 3)
    target.keep_path([1, 3])
    assert target.tokens == (1, 2, 3, 4, 5)


def test_a_replay_that_does_not_reproduce_the_answer_is_an_error() -> None:
    target, data, clock = tree_target()
    options = GenerationOptions(max_tokens=3, spec=Spec.OFF)
    done = run_answer(target, data.prompt, options, Plain(), Hooks(clock=clock), data.answer,
                      "x")
    assert done.tokens == data.answer
    target, data, clock = tree_target()
    with pytest.raises(RuntimeError, match="the replay of y did not reproduce"):
        run_answer(target, data.prompt, options, Plain(), Hooks(clock=clock), (4, 5, 5), "y")


def _setup() -> Setup:
    item = rec.Recorded("s1", "session", tuple(PROMPT), tuple(ANSWER), "eog", None)
    recording = rec.Recording("t.gguf", None, "test", 64, frozenset({EOG}), (item,))
    profile: profiles.CostProfile = gpu_profile()
    return Setup.of(item, recording, profile)


def test_the_oracle_copies_from_further_candidates_when_they_are_right() -> None:
    """Nothing in the prompt to copy: the lookup-only oracle decodes plainly; given the
    answer as a stored continuation it drafts it, and commits the same answer faster."""
    alone = _setup()
    plain = alone.run("oracle", oracle_policy(alone), Hooks(clock=alone.clock))
    stored = _setup()
    answer = stored.data.answer

    def candidates(context: Sequence[int], depth: int) -> list[list[int]]:
        i = len(context) - len(stored.data.prompt)
        return [[0, 0], list(answer[i: i + depth])]  # a wrong one, then the right one

    copied = stored.run("oracle", oracle_policy(stored, candidates), Hooks(clock=stored.clock))
    assert plain.steps == len(ANSWER) and copied.steps < plain.steps / 3
    assert copied.seconds < plain.seconds


def test_wrong_candidates_never_make_the_oracle_slower() -> None:
    alone = _setup()
    base = alone.run("oracle", oracle_policy(alone), Hooks(clock=alone.clock))
    noisy = _setup()
    rng = np.random.default_rng(3)

    def candidates(context: Sequence[int], depth: int) -> list[list[int]]:
        return [rng.integers(0, noisy.data.n_vocab, depth).tolist()]

    worse = noisy.run("oracle", oracle_policy(noisy, candidates), Hooks(clock=noisy.clock))
    assert worse.seconds <= base.seconds + 1e-12


def test_a_research_scripts_table_is_named_or_given() -> None:
    cpu = profiles.load("cpu-2core-qwen1.5b").target
    assert TablePrices.named(None).batch(2) == pytest.approx(cpu.batch_ratios[1])
    assert TablePrices.named("cpu") == TablePrices.named(None)
    assert TablePrices.named("gpu").batch(33) == pytest.approx(1.96)
    assert TablePrices.named("1,1.5,2").batch(3) == pytest.approx(2.0)
    with pytest.raises(UsageError, match="--table fast: cpu, gpu or numbers"):
        TablePrices.named("fast")
