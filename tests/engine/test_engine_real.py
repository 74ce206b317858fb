"""The engine on real GGUF logits: exact distribution, greedy equivalence, cache consistency.

SmolLM2-135M is the target; a Q2_K requantization of it is a real draft that disagrees on a
good share of its choices, which is what a test of partial acceptance needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.sampling import probs
from tests.support.realengine import (
    PROMPTS,
    answer,
    check_greedy_equivalence,
    chi_square_p,
    next_logits,
    prompt_of,
)

# A missing llama-cpp-python build skips this file with a message instead of breaking the
# collection of the whole suite.
llama_cpp = pytest.importorskip("llama_cpp",
                              reason="llama-cpp-python is not installed (see backends/)")
backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")
LlamaModel = backend.LlamaModel
load_model, requantize = backend.load_model, files.requantize

pytestmark = pytest.mark.real

N_DRAWS = 2000
WARPS = SamplingOptions(temperature=1.0, top_k=8)


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Iterator[LlamaModel]:
    with load_model(real_model_path("smollm2-135m"), n_ctx=1024) as model:
        yield model


@pytest.fixture(scope="module")
def smol_q2(real_model_path: Callable[[str], Path],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaModel]:
    path = requantize(real_model_path("smollm2-135m"),
                      tmp_path_factory.mktemp("q2") / "smol-q2_k.gguf", "Q2_K")
    with load_model(path, n_ctx=1024) as model:
        yield model


def exact_pairs(model: LlamaModel, prompt: list[int]) -> dict[tuple[int, int], float]:
    """P(t1, t2) under the warped target, enumerated over the top-k support."""
    p1 = probs(next_logits(model, prompt), [], WARPS)
    out: dict[tuple[int, int], float] = {}
    for t1 in np.flatnonzero(p1):
        p2 = probs(next_logits(model, [*prompt, int(t1)]), [], WARPS)
        for t2 in np.flatnonzero(p2):
            out[(int(t1), int(t2))] = float(p1[t1] * p2[t2])
    return out


def draws(target: LlamaModel, prompt: list[int], spec: str,
          draft: LlamaModel | None) -> tuple[Counter[tuple[int, int]], int, int]:
    counts: Counter[tuple[int, int]] = Counter()
    drafted = accepted = 0
    for seed in range(N_DRAWS):
        options = GenerationOptions(sampling=SamplingOptions(temperature=1.0, top_k=8, seed=seed),
                                    max_tokens=2, spec=spec, draft_max=2)
        done = answer(target, prompt, options, draft)
        counts[(done.tokens[0], done.tokens[1])] += 1
        drafted += done.stats.drafted
        accepted += done.stats.accepted
    return counts, drafted, accepted


def test_first_two_tokens_have_the_targets_exact_distribution(smol: LlamaModel,
                                                              smol_q2: LlamaModel) -> None:
    prompt = prompt_of(smol, "Tell me a story about a dragon.")
    exact = exact_pairs(smol, prompt)
    counts, drafted, accepted = draws(smol, prompt, "draft", smol_q2)
    assert 0 < accepted < drafted, "the Q2_K draft should be accepted only partly"
    assert chi_square_p(counts, exact) > 1e-4
    # Negative control: an always-accept rule emits the draft's own samples. Drawn from the
    # draft's exact pair distribution, they must be told apart by the very same test.
    q = exact_pairs(smol_q2, prompt)
    cells = list(q)
    rng = np.random.default_rng(0)
    weights = np.array([q[c] for c in cells]) / sum(q.values())
    picks = rng.choice(len(cells), size=N_DRAWS, p=weights)
    wrong = Counter(cells[i] for i in picks)
    outside = set(wrong) - set(exact)
    assert outside or chi_square_p(wrong, exact) < 1e-4


def test_greedy_speculation_equals_plain_decoding_on_smollm2(smol: LlamaModel,
                                                             smol_q2: LlamaModel) -> None:
    differ = check_greedy_equivalence(smol, smol_q2, ["draft", "ngram", "auto"], 48)
    assert sum(differ.values()) <= len(PROMPTS) // 4  # near-ties are rare, not the rule


@pytest.mark.slow
def test_greedy_speculation_equals_plain_decoding_on_the_qwen_pair(
        real_model_path: Callable[[str], Path]) -> None:
    with load_model(real_model_path("qwen2.5-coder-1.5b"), n_ctx=1024) as target, \
            load_model(real_model_path("qwen2.5-coder-0.5b"), n_ctx=1024) as draft:
        differ = check_greedy_equivalence(target, draft, ["draft", "ngram"], 24)
    assert sum(differ.values()) <= len(PROMPTS) // 4


def test_cache_matches_a_fresh_context_after_many_rejections(
        smol: LlamaModel, smol_q2: LlamaModel, real_model_path: Callable[[str], Path]) -> None:
    prompt = prompt_of(smol, "Write a long story about a lighthouse keeper.")
    options = GenerationOptions(sampling=SamplingOptions(temperature=1.0, seed=7),
                                max_tokens=160, spec="draft", draft_max=4)
    done = answer(smol, prompt, options, smol_q2)
    assert done.stats.accepted < done.stats.drafted  # there were rejections
    context = [*prompt, *done.tokens]
    assert list(smol.tokens) == context[:-1]  # the loop's invariant: committed minus last
    after = smol.eval([context[-1]], [-1])[0].copy()
    with load_model(real_model_path("smollm2-135m"), n_ctx=1024) as fresh:
        stepwise = fresh.eval(context[:1], [-1])[0]
        for token in context[1:]:
            stepwise = fresh.eval([token], [-1])[0]
        fresh.truncate(0)
        batched = fresh.eval(context, [-1])[0]
    # One batch of ~200 tokens and single steps take different kernels: that difference is
    # the float noise here. A cache holding wrong tokens or positions is off by far more.
    noise = float(np.max(np.abs(batched - stepwise)))
    assert int(np.argmax(after)) == int(np.argmax(stepwise))
    assert float(np.max(np.abs(after - stepwise))) <= max(2 * noise, 0.05)
