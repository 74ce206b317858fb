"""The engine on a real GGUF model: chat prompts, whole answers, next-token logits, and the
check that a greedy speculative answer leaves plain decoding's only at a near tie (two logits
no further apart than batched and one-token arithmetic differ there)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats as sps

from specchat.engine.build import generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions
from specchat.llm import ChatTemplate, chat_tokens

if TYPE_CHECKING:
    from specchat.llm.model import LlamaModel

# Past the 512 cells where flash attention splits a single row between threads (llm/exact.py).
SPLIT_DEPTH = 700
PROMPTS = [
    "Write a haiku about the sea.", "What is 17 times 23?", "Name three primary colours.",
    "Explain recursion in one sentence.", "Translate 'good morning' into Spanish.",
    "List the days of the week.", "def fib(n):\n    # complete this function",
    "What is the capital of Japan?", "Give me a synonym for 'happy'.",
    "Write a SQL query selecting all rows from users.", "Why is the sky blue?",
    "Count from one to ten in words.", "Write a Python one-liner to reverse a list.",
    "What does HTTP stand for?", "Summarise: The cat sat on the mat. The mat was red.",
    "Repeat after me: the quick brown fox jumps over the lazy dog.",
    "Write a short limerick about a programmer.", "What is the boiling point of water?",
    "Suggest a name for a pet turtle.", "Describe a rainbow to a child.",
]


def prompt_of(model: LlamaModel, text: str) -> list[int]:
    return chat_tokens(model, ChatTemplate.from_model(model), [{"role": "user", "content": text}])


def answer(target: LlamaModel, prompt: list[int], options: GenerationOptions,
           draft: LlamaModel | None = None) -> Finished:
    last = list(generate(target, prompt, options, draft=draft))[-1]
    assert isinstance(last, Finished)
    return last


def next_logits(model: LlamaModel, context: list[int]) -> np.ndarray:
    model.truncate(0)
    row = model.eval(context, [-1])[0].copy()
    model.truncate(0)
    return row


def chi_square_p(counts: Counter[tuple[int, int]], exact: dict[tuple[int, int], float]) -> float:
    """Goodness of fit, pooling cells expected below 5 so the chi-square law holds."""
    n = sum(counts.values())
    assert set(counts) <= set(exact), "a sequence the target can never produce was drawn"
    obs, exp, pool_o, pool_e = [], [], 0.0, 0.0
    for cell, p in exact.items():
        if p * n >= 5:
            obs.append(counts.get(cell, 0))
            exp.append(p * n)
        else:
            pool_o += counts.get(cell, 0)
            pool_e += p * n
    obs.append(pool_o)
    exp.append(pool_e)
    return float(sps.chisquare(obs, exp).pvalue)


def first_divergence(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def assert_near_tie(target: LlamaModel, context: list[int], plain: int, spec: int,
                    where: str) -> None:
    """Where a speculative answer left plain decoding's, the two tokens' logits after
    `context` are no further apart than batched and single-token arithmetic differ there."""
    row = next_logits(target, context)
    gap = abs(float(row[plain]) - float(row[spec]))
    noise = batch_noise(target, context)
    print(f"{where}: logit gap {gap:.3f}, noise {noise:.3f}")
    assert gap <= noise, f"{where}: gap {gap} > noise {noise}"


def batch_noise(model: LlamaModel, context: list[int], width: int = 5) -> float:
    """How far the same logits rows move between one-token steps and one batch of `width`
    (the two ways plain and speculative decoding compute them): the float noise scale."""
    single, batch = single_and_batch(model, context[:-width], context[-width:])
    return float(np.max(np.abs(single - batch)))


def random_context(seed: int, depth: int = SPLIT_DEPTH) -> tuple[list[int], list[int]]:
    """A random prompt of `depth` tokens and three random tokens to follow it."""
    rng = np.random.default_rng(seed)
    return rng.integers(100, 20000, depth).tolist(), rng.integers(100, 20000, 3).tolist()


def single_and_batch(model: LlamaModel, prompt: list[int], tokens: list[int]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The logits of `tokens` one step at a time, and as one batch, after `prompt`."""
    model.truncate(0)
    model.eval(prompt, [])
    single = np.stack([model.eval([t], [0])[0].copy() for t in tokens])
    model.truncate(len(prompt))
    batch = model.eval(tokens, list(range(len(tokens)))).copy()
    model.truncate(0)
    return single, batch


def check_greedy_equivalence(target: LlamaModel, draft: LlamaModel | None, modes: list[str],
                             n_tokens: int) -> dict[str, int]:
    """Count prompts whose speculative output differs from plain decoding; at every
    divergence the target's top-2 logits (single-token evaluation) must be a near tie."""
    differ: dict[str, int] = dict.fromkeys(modes, 0)
    for text in PROMPTS:
        prompt = prompt_of(target, text)
        off = answer(target, prompt, GenerationOptions(max_tokens=n_tokens, spec="off"))
        for mode in modes:
            spec = answer(target, prompt, GenerationOptions(max_tokens=n_tokens, spec=mode,
                                                            draft_max=4), draft)
            i = first_divergence(off.tokens, spec.tokens)
            if i is None:
                continue
            differ[mode] += 1
            assert_near_tie(target, [*prompt, *off.tokens[:i]], off.tokens[i], spec.tokens[i],
                            f"{mode}: diverged at token {i}")
    print(f"greedy divergences over {len(PROMPTS)} prompts: {differ}")
    return differ
