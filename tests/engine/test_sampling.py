"""The warps, each against a plain reference written the obvious (slow) way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from specchat.engine.options import OptionError, SamplingOptions
from specchat.engine.sampling import (
    greedy_token,
    probs,
    recent_window,
    sample,
)


def reference(logits: np.ndarray, recent: Sequence[int], o: SamplingOptions) -> np.ndarray:
    """llama.cpp's chain, spelled out: penalty, top-k, top-p, min-p, temperature."""
    x = np.asarray(logits, dtype=np.float64).copy()
    for t in set(recent):
        x[t] = x[t] / o.repeat_penalty if x[t] > 0 else x[t] * o.repeat_penalty
    if o.temperature == 0:
        out = np.zeros_like(x)
        out[int(np.argmax(x))] = 1.0
        return out
    keep = np.isfinite(x)
    if o.top_k > 0:
        kth = sorted(x, reverse=True)[min(o.top_k, len(x)) - 1]
        keep &= x >= kth
    p = np.where(keep, np.exp(x - x.max()), 0.0)
    p /= p.sum()
    if o.top_p < 1:
        order = sorted(range(len(p)), key=lambda i: -p[i])
        total, kept = 0.0, set()
        for i in order:
            kept.add(i)
            total += p[i]
            if total >= o.top_p:
                break
        keep &= np.isin(np.arange(len(p)), list(kept))
        p = np.where(keep, p, 0.0)
        p /= p.sum()
    if o.min_p > 0:
        keep &= p >= o.min_p * p.max()
    out = np.where(keep, np.exp((x - x.max()) / o.temperature), 0.0)
    return out / out.sum()


def random_options(rng: np.random.Generator) -> SamplingOptions:
    return SamplingOptions(
        temperature=float(rng.choice([0.0, 0.3, 1.0, 1.7])),
        top_k=int(rng.choice([0, 1, 3, 7])),
        top_p=float(rng.choice([1.0, 0.95, 0.6, 0.2])),
        min_p=float(rng.choice([0.0, 0.05, 0.3])),
        repeat_penalty=float(rng.choice([1.0, 1.3, 0.8])),
    )


def test_probs_match_the_reference_chain_on_random_inputs() -> None:
    rng = np.random.default_rng(0)
    for _ in range(400):
        logits = (rng.standard_normal(12) * 3).astype(np.float32)
        recent = list(rng.integers(0, 12, size=int(rng.integers(0, 6))))
        o = random_options(rng)
        np.testing.assert_allclose(probs(logits, recent, o), reference(logits, recent, o),
                                   rtol=1e-9, atol=1e-12, err_msg=str(o))


def test_repeat_penalty_is_llama_cpp_rule() -> None:
    logits = np.array([2.0, -2.0, 1.0, 0.0, 3.0])
    opts = SamplingOptions(temperature=1.0, repeat_penalty=2.0)
    out = probs(logits, [0, 1, 3, 0, 0], opts)  # repeats count once
    want = np.exp([1.0, -4.0, 1.0, 0.0, 3.0])
    np.testing.assert_allclose(out, want / want.sum())
    assert logits[0] == 2.0  # input untouched
    assert greedy_token(np.array([2.0, 3.0]), [1], opts) == 0  # 3 / 2 < 2
    np.testing.assert_allclose(probs(logits, [0], SamplingOptions(temperature=1.0)),
                               np.exp(logits) / np.exp(logits).sum())


def test_penalty_window_is_the_last_n_tokens_of_context_plus_drafts() -> None:
    assert recent_window([1, 2, 3, 4], [5, 6], 3) == [4, 5, 6]
    assert recent_window([1, 2], [5], 8) == [1, 2, 5]
    assert recent_window([1, 2], [5], 0) == []
    assert recent_window([1, 2, 3], [5, 6, 7, 8], 2) == [7, 8]


def test_temperature_alone_is_a_tempered_softmax() -> None:
    logits = np.array([1.0, 2.0, 0.5, -1.0])
    for t in (0.5, 1.0, 2.0):
        want = np.exp(logits / t) / np.exp(logits / t).sum()
        np.testing.assert_allclose(probs(logits, [], SamplingOptions(temperature=t)), want)


def test_top_k_top_p_min_p_keep_the_documented_sets() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))

    def support(**kw: Any) -> set[int]:
        return set(np.flatnonzero(probs(logits, [], SamplingOptions(temperature=1.0, **kw))))

    assert support(top_k=2) == {0, 1}
    assert support(top_p=0.7) == {0, 1}  # 0.5 + 0.2 reaches 0.7
    assert support(top_p=0.71) == {0, 1, 2}
    assert support(min_p=0.3) == {0, 1, 2}  # >= 0.15
    assert support(top_k=4, top_p=0.9, min_p=0.25) == {0, 1, 2}


def test_top_p_and_min_p_judge_the_untempered_distribution() -> None:
    # llama.cpp applies temperature last: a hot temperature must not widen the kept set.
    logits = np.log(np.array([0.6, 0.3, 0.1]))
    for t in (0.2, 1.0, 5.0):
        p = probs(logits, [], SamplingOptions(temperature=t, top_p=0.8))
        assert set(np.flatnonzero(p)) == {0, 1}


def test_truncations_on_a_large_vocabulary_look_past_the_first_margin() -> None:
    # A few likely tokens and a long tail 5-10 nats below: the candidate scan has to widen.
    rng = np.random.default_rng(1)
    logits = np.concatenate([np.zeros(10), -5 - 5 * rng.random(60_000)]).astype(np.float32)
    rng.shuffle(logits)
    for o, wide in ((SamplingOptions(temperature=0.7, top_p=0.9), True),
                    (SamplingOptions(temperature=1.0, top_k=500), True),
                    (SamplingOptions(temperature=1.2, top_k=20_000, top_p=0.5, min_p=0.001), True),
                    (SamplingOptions(temperature=1.0, min_p=0.01, repeat_penalty=1.5), False)):
        recent = list(range(0, 60_000, 7))
        got = probs(logits, recent, o)
        np.testing.assert_allclose(got, reference(logits, recent, o), rtol=1e-9, atol=1e-15)
        assert (np.count_nonzero(got) > 10) == wide


def test_greedy_is_argmax_of_penalized_logits_and_one_hot() -> None:
    logits = np.array([3.0, 2.9, 0.0])
    o = SamplingOptions(temperature=0.0, repeat_penalty=1.1, top_k=1)
    assert greedy_token(logits, [], o) == 0
    assert greedy_token(logits, [0], o) == 1  # 3.0 / 1.1 < 2.9
    np.testing.assert_array_equal(probs(logits, [0], o), [0.0, 1.0, 0.0])


def test_minus_infinity_logits_get_exactly_zero() -> None:
    logits = np.array([1.0, -np.inf, 0.5, -np.inf], dtype=np.float32)
    for o in (SamplingOptions(temperature=1.0), SamplingOptions(temperature=0.7, top_p=0.99,
                                                                repeat_penalty=1.5)):
        p = probs(logits, [1, 3], o)
        assert p[1] == 0.0 and p[3] == 0.0 and abs(p.sum() - 1) < 1e-12


def test_sample_never_draws_a_zero_probability_token() -> None:
    rng = np.random.default_rng(2)
    dist = np.array([0.0, 0.25, 0.0, 0.75, 0.0])
    draws = np.array([sample(dist, rng) for _ in range(4000)])
    assert set(draws) == {1, 3}
    assert abs((draws == 3).mean() - 0.75) < 0.03
    # Round-off at the top of the CDF must still land on a possible token.
    class Top:
        def random(self) -> float:
            return 1.0 - 1e-17
    assert sample(np.array([0.3, 0.7, 0.0]), Top()) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5},
                                 {"min_p": 1.0}, {"top_k": -1}, {"repeat_penalty": 0.0}])
def test_options_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(OptionError):
        SamplingOptions(**bad)  # type: ignore[arg-type]


def test_a_temperature_too_tiny_to_divide_by_is_greedy() -> None:
    logits = np.array([0.5, 2.0, 1.0, -3.0], dtype=np.float32)
    for tiny in (1e-320, 5e-324, 1e-9):
        dist = probs(logits, [], SamplingOptions(temperature=tiny))
        assert np.isfinite(dist).all() and dist.tolist() == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("penalty", [1e-320, 0.001, 1e6])
def test_a_repeat_penalty_that_overflows_logits_is_refused(penalty: float) -> None:
    with pytest.raises(OptionError, match="repeat_penalty must be from 0.01 to 100"):
        SamplingOptions(repeat_penalty=penalty)
