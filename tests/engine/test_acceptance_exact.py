"""Speculative sampling is exact: the answers have the target's distribution, to the draw.

Every draw is a full `generate` call with max_tokens=3 and its own seed, so the whole path
is under test (drafter, one-call verification, penalty windows per row, acceptance, commit).
The reference is the exact distribution of all 3-token continuations, enumerated from the
fake target's logits through the same warps. A chi-square test with cells of expected count
< 5 pooled must give p > 1e-4 at 20,000 draws; the negative controls (a rule that always
accepts; a draft that reports an unwarped q) must give p < 1e-4 on the very same check.
Seeds are fixed, so each verdict is reproducible.

To fit 140,000 draws in seconds, the pure warp function (`probs`) is memoized for these
tests: same logits, window and options give the same array, so only time changes. The
warps themselves are checked against independent references in test_sampling.py.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from specchat.engine import build, drafters, loop
from specchat.engine.drafters import Draft, DraftModelDrafter
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.sampling import biased, probs, recent_window, sample
from tests.support.fakes import FakeModel

N_DRAWS = 20_000
P_MIN = 1e-4
LENGTH = 3
PROMPT = [0, 1, 2, 3, 0, 1, 2, 4, 0, 1]  # repeated n-grams, so prompt lookup drafts

PLAIN = SamplingOptions(temperature=1.0)
TOPK_PENALTY = SamplingOptions(temperature=1.0, top_k=3, repeat_penalty=1.5, repeat_last_n=4)
TOPP_MINP = SamplingOptions(temperature=0.8, top_p=0.8, min_p=0.1)
ALL_WARPS = SamplingOptions(temperature=1.3, top_k=5, top_p=0.9, min_p=0.05,
                            repeat_penalty=1.3, repeat_last_n=3)


@pytest.fixture(autouse=True)
def memoized_warps(monkeypatch: pytest.MonkeyPatch) -> None:
    memo: dict[tuple[Any, ...], np.ndarray] = {}

    def cached(logits: np.ndarray, recent: Sequence[int], opts: SamplingOptions) -> np.ndarray:
        key = (logits.tobytes(), tuple(recent), opts.temperature, opts.top_k, opts.top_p,
               opts.min_p, opts.repeat_penalty)
        out = memo.get(key)
        if out is None:
            out = probs(logits, recent, opts)
            out.setflags(write=False)  # the engine must never modify a row it was given
            memo[key] = out
        return out

    monkeypatch.setattr(loop, "probs", cached)
    monkeypatch.setattr(drafters, "probs", cached)


def exact_sequences(model: FakeModel, prompt: Sequence[int], opts: SamplingOptions,
                    length: int = LENGTH,
                    allowed: Callable[[tuple[int, ...]], np.ndarray] | None = None
                    ) -> dict[tuple[int, ...], float]:
    """P(continuation) for every continuation of `length` tokens, by enumeration; under a
    constraint when `allowed` gives the tokens it allows after each continuation so far."""
    out: dict[tuple[int, ...], float] = {(): 1.0}
    n_recent = opts.repeat_last_n if opts.repeat_penalty != 1.0 else 0
    for _ in range(length):
        grown: dict[tuple[int, ...], float] = {}
        for seq, pr in out.items():
            ctx = [*prompt, *seq]
            row = model.logits_for(ctx)
            if allowed is not None:
                row = biased(row, opts, allowed(seq))
            p = probs(row, recent_window(ctx, [], n_recent), opts)
            for t in np.flatnonzero(p > 0):
                grown[(*seq, int(t))] = pr * float(p[t])
        out = grown
    return out


@dataclasses.dataclass
class Draws:
    counts: Counter[tuple[int, ...]]
    drafted: int = 0
    accepted: int = 0


def draw(target: FakeModel, options: GenerationOptions, n: int = N_DRAWS,
         draft: FakeModel | None = None, seed0: int = 0) -> Draws:
    result = Draws(Counter())
    for i in range(n):
        opts = dataclasses.replace(
            options, sampling=dataclasses.replace(options.sampling, seed=seed0 + i))
        *_, fin = build.generate(target, PROMPT, opts, draft=draft)
        assert isinstance(fin, Finished) and fin.reason == "length"
        result.counts[fin.tokens] += 1
        result.drafted += fin.stats.drafted
        result.accepted += fin.stats.accepted
    return result


def chi2_pvalue(counts: Counter[tuple[int, ...]], exact: dict[tuple[int, ...], float]) -> float:
    """Chi-square p-value of the counts against the exact distribution (small cells pooled).

    A sequence the target can never produce makes the p-value 0 outright.
    """
    n = sum(counts.values())
    if any(exact.get(seq, 0.0) <= 0.0 for seq in counts):
        return 0.0
    cells = sorted(exact, key=lambda s: -exact[s])
    big = [s for s in cells if exact[s] * n >= 5]
    small = [s for s in cells if exact[s] * n < 5]
    obs = [counts[s] for s in big]
    exp = [exact[s] * n for s in big]
    pooled_exp = sum(exact[s] for s in small) * n
    if small and pooled_exp >= 5:
        obs.append(sum(counts[s] for s in small))
        exp.append(pooled_exp)
    elif small:  # too small to stand alone: fold into the smallest big cell
        obs[-1] += sum(counts[s] for s in small)
        exp[-1] += pooled_exp
    exp_arr = np.asarray(exp) * (n / sum(exp))  # remove float drift from the enumeration
    return float(chisquare(obs, exp_arr).pvalue)


def total_variation(counts: Counter[tuple[int, ...]], exact: dict[tuple[int, ...], float]) -> float:
    n = sum(counts.values())
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts[k] / n - exact.get(k, 0.0)) for k in keys)


def assert_exact(result: Draws, exact: dict[tuple[int, ...], float]) -> None:
    p = chi2_pvalue(result.counts, exact)
    tv = total_variation(result.counts, exact)
    print(f"chi-square p={p:.3g}, TV {tv:.4f}")
    assert p > P_MIN, f"chi-square p={p:.3g} (TV {tv:.4f}) at n={sum(result.counts.values())}"


def options(sampling: SamplingOptions, spec: str, k: int = 3) -> GenerationOptions:
    return GenerationOptions(sampling=sampling, max_tokens=LENGTH, spec=spec, draft_max=k)


def test_draft_equal_to_target_accepts_everything_and_is_exact() -> None:
    target = FakeModel(6, seed=11)
    twin = FakeModel(6, seed=11)
    result = draw(target, options(TOPK_PENALTY, "draft"), draft=twin)
    assert result.drafted > 0 and result.accepted == result.drafted  # acceptance exactly 1.0
    assert_exact(result, exact_sequences(target, PROMPT, TOPK_PENALTY))


def test_disjoint_draft_accepts_nothing_and_output_is_still_exact() -> None:
    target = FakeModel(6, seed=12, support=[0, 1, 2])
    other = FakeModel(6, seed=13, support=[3, 4, 5])
    result = draw(target, options(TOPP_MINP, "draft"), draft=other)
    assert result.drafted > 0 and result.accepted == 0
    assert_exact(result, exact_sequences(target, PROMPT, TOPP_MINP))


def test_random_draft_is_exact_with_every_warp() -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    result = draw(target, options(ALL_WARPS, "draft"), draft=draft)
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(target, PROMPT, ALL_WARPS))


def test_prompt_lookup_is_exact_with_every_warp() -> None:
    # A flatter target (scale 1) so that the prompt's continuations are sometimes right.
    target = FakeModel(6, seed=16, scale=1.0)
    result = draw(target, options(ALL_WARPS, "ngram"))
    assert result.drafted > N_DRAWS  # the prompt's repeats make it draft on most steps
    assert 0 < result.accepted < result.drafted
    assert_exact(result, exact_sequences(target, PROMPT, ALL_WARPS))


# --- negative controls: wrong rules must fail the same check ----------------------------

def always_accept(p: Any, draft: Sequence[int], q: Any, rng: np.random.Generator
                   ) -> tuple[int, int]:
    row = p if callable(p) else p.__getitem__
    return len(draft), sample(row(len(draft)), rng)


class UnwarpedQDrafter(DraftModelDrafter):
    """Samples from the warped q, as it must, but reports q before the truncation warps."""

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        d = super().propose(context, k, rng)
        plain = SamplingOptions(temperature=self.sampling.temperature)
        fake = self.model
        assert isinstance(fake, FakeModel)
        q = tuple(drafters.probs(fake.logits_for([*context, *d.tokens[:i]]), [], plain)
                  for i in range(len(d.tokens)))
        return Draft(d.tokens, q)


def test_negative_control_always_accepting_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    monkeypatch.setattr(loop, "accept_sampled", always_accept)
    result = draw(target, options(PLAIN, "draft"), draft=draft)
    assert chi2_pvalue(result.counts, exact_sequences(target, PROMPT, PLAIN)) < P_MIN


def test_negative_control_unwarped_q_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    target = FakeModel(6, seed=14)
    draft = FakeModel(6, seed=15)
    monkeypatch.setattr(build, "make_drafter",
                        lambda o, t, d, c=None: UnwarpedQDrafter(d, o.sampling))
    result = draw(target, options(TOPK_PENALTY, "draft"), draft=draft)
    assert chi2_pvalue(result.counts, exact_sequences(target, PROMPT, TOPK_PENALTY)) < P_MIN
