"""What the exactness tests compare against: the exact distribution of short continuations
of a fake target, enumerated through the same warps, many seeded `generate` draws, and a
chi-square check with small cells pooled; plus a wrong acceptance rule for negative controls."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.stats import chisquare

from specchat.engine import build
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


def always_accept(p: Any, draft: Sequence[int], q: Any, rng: np.random.Generator
                   ) -> tuple[int, int]:
    row = p if callable(p) else p.__getitem__
    return len(draft), sample(row(len(draft)), rng)
