"""Drafting text across real vocabularies is exact at temperature 1, on real logits.

Gemma-3-270M (262,144 ids) is the target and SmolLM2-135M (49,152 ids) drafts its text, and the
reverse. After "One, two, three, four," the draft writes " five," which the target keeps with
a probability well inside (0, 1) (about 0.75 then 0.6 for Gemma, 0.42 then 0.81 for SmolLM2 at
top-k 8), so acceptance, the residual draw after a rejection and the bonus token all matter.

Each draw is a full `generate` call (3 tokens or an end, draft_max 2, its own seed) through the
engine's speculative step with the text drafter; the reference is the exact distribution of all
answers of 3 tokens enumerated from the target's own logits through the same warps. The check is
test_acceptance_exact.py's (chi-square, cells expected below 5 pooled, p > 1e-4); a rule that
always accepts, and one that draws a rejected token's replacement from p itself instead of p
without it, must fail it.

Both models are real; their logits are a function of the context, each context evaluated
once (`Replayed`), so the draws cost sampling only and the test fits the suite's time.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.engine import acceptance, build, loop
from specchat.engine.build import Hooks
from specchat.engine.drafters import fill_cache
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.protocol import ContextFullError
from specchat.engine.textdraft import TextVocabs
from tests.support.exactness import (
    P_MIN,
    Draws,
    always_accept,
    assert_exact,
    chi2_pvalue,
    exact_sequences,
)

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
from specchat.llm import load_model  # noqa: E402
from specchat.llm.model import LlamaModel  # noqa: E402
from specchat.llm.textvocab import LlamaTextVocab  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("memoized_warps")]

N_DRAWS = 2000
N_CONTROL = 1000  # the wrong rules miss by far (p < 1e-80 at this count)
TEXT = "One, two, three, four,"
WARPS = SamplingOptions(temperature=1.0, top_k=8)


class Replayed:
    """A real model's logits as a function of the context alone, as the fakes' are: each
    context is evaluated once (its last token alone, after its prefix), and a batch gets the
    rows of its contexts. A backend's batched and single-token arithmetic differ a little
    (up to Gemma's 0.75-logit batch noise, test_textdraft_real.py's near ties); that is not
    what this test measures, and the reference must be the logits the engine sampled from."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._tokens: list[int] = []
        self._memo: dict[tuple[int, ...], np.ndarray] = {}
        self.n_vocab, self.n_ctx = model.n_vocab, model.n_ctx
        self.eog_tokens = model.eog_tokens

    @property
    def tokens(self) -> Sequence[int]:
        return self._tokens

    def token_bytes(self, token: int) -> bytes:
        return self.model.token_bytes(token)

    def truncate(self, n: int) -> None:
        del self._tokens[n:]

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ContextFullError(len(self._tokens) + len(tokens), self.n_ctx)
        rows = [r % len(tokens) for r in logit_rows]
        out = np.stack([self.logits_for([*self._tokens, *tokens[: r + 1]]) for r in rows]) \
            if rows else np.empty((0, self.n_vocab), dtype=np.float32)
        self._tokens.extend(tokens)
        return out

    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        """The next-token logits after `context`."""
        key = tuple(context)
        row = self._memo.get(key)
        if row is None:
            fill_cache(self.model, context[:-1])
            row = self._memo[key] = self.model.eval([context[-1]], [-1])[0].copy()
            row.setflags(write=False)
        return row


@pytest.fixture(scope="module")
def models(real_model_path: Callable[[str], Path]) -> Iterator[dict[str, LlamaModel]]:
    with load_model(real_model_path("smollm2-135m"), n_ctx=256) as smol, \
            load_model(real_model_path("gemma3-270m"), n_ctx=256) as gemma:
        yield {"smollm2": smol, "gemma3": gemma}


@dataclasses.dataclass
class Setup:
    target: Replayed
    draft: Replayed
    vocabs: TextVocabs
    prompt: list[int]


@pytest.fixture(scope="module", params=[("gemma3", "smollm2"), ("smollm2", "gemma3")],
                ids=["smollm2-drafts-gemma3", "gemma3-drafts-smollm2"])
def pair(request: pytest.FixtureRequest, models: dict[str, LlamaModel]) -> Setup:
    target, draft = (models[name] for name in request.param)
    prompt = target.tokenize(TEXT, add_special=True, parse_special=False)
    return Setup(Replayed(target), Replayed(draft),
                 TextVocabs(LlamaTextVocab(target), LlamaTextVocab(draft)), prompt)


@pytest.fixture(scope="module")
def exact(pair: Setup) -> dict[tuple[int, ...], float]:
    """P(answer) for every answer of 3 tokens, or fewer where an end of generation ends it
    (what followed it in the enumeration sums to 1)."""
    out: dict[tuple[int, ...], float] = defaultdict(float)
    for seq, p in exact_sequences(pair.target, pair.prompt, WARPS).items():  # type: ignore[arg-type]
        end = next((i + 1 for i, t in enumerate(seq) if t in pair.target.eog_tokens), len(seq))
        out[seq[:end]] += p
    return dict(out)


def draw(pair: Setup, n: int = N_DRAWS) -> Draws:
    result = Draws(Counter())
    for seed in range(n):
        options = GenerationOptions(sampling=dataclasses.replace(WARPS, seed=seed),
                                    max_tokens=3, spec="draft", draft_max=2)
        *_, fin = build.generate(pair.target, pair.prompt, options, draft=pair.draft,
                                hooks=Hooks(vocabs=pair.vocabs))
        assert isinstance(fin, Finished) and fin.reason in ("length", "eog")
        result.counts[fin.tokens] += 1
        result.drafted += fin.stats.drafted
        result.accepted += fin.stats.accepted
    return result


def test_sampled_answers_have_the_targets_exact_distribution(
        pair: Setup, exact: dict[tuple[int, ...], float]) -> None:
    result = draw(pair)
    print(f"acceptance {result.accepted}/{result.drafted}")
    assert 0.2 * result.drafted < result.accepted < 0.9 * result.drafted
    assert_exact(result, exact)


def test_negative_control_always_accepting_fails(
        pair: Setup, exact: dict[tuple[int, ...], float],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "accept_sampled", always_accept)
    assert chi2_pvalue(draw(pair, N_CONTROL).counts, exact) < P_MIN


def test_negative_control_replacing_a_rejection_from_p_itself_fails(
        pair: Setup, exact: dict[tuple[int, ...], float],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The subtle error: after a rejection, draw from p rather than p without the rejected
    token (the rejected token then comes out too often)."""
    monkeypatch.setattr(acceptance, "residual", lambda p, q, token: p)
    p = chi2_pvalue(draw(pair, N_CONTROL).counts, exact)
    print(f"chi-square p={p:.3g}")
    assert p < P_MIN
