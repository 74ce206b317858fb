"""An exact target (llm/exact.py) on real GGUF logits: verify rows are single steps bit for bit,
whatever the depth and the thread count, and greedy answers are plain decoding's token for
token; with the same depth and threads a plain target is not (the negative control)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import common_prefix
from tests.support.realengine import (
    PROMPTS,
    answer,
    prompt_of,
    random_context,
    single_and_batch,
)

backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")
LlamaModel = backend.LlamaModel

pytestmark = pytest.mark.real

THREADS = 2  # the split needs two threads; forced, so a one-core machine checks it too


@pytest.fixture(scope="module")
def smol_path(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("smollm2-135m")


@pytest.fixture(scope="module")
def exact(smol_path: Path) -> Iterator[LlamaModel]:
    with backend.load_model(smol_path, n_ctx=2048, n_threads=THREADS, n_gpu_layers=0,
                            exact=True) as model:
        yield model


def test_an_exact_targets_verify_rows_are_single_steps_bit_for_bit(exact: LlamaModel) -> None:
    assert exact.exact_rows == 3 and exact.flash_attn is True
    prompt, tokens = random_context(0)
    for size in range(2, exact.exact_rows + 1):
        single, batch = single_and_batch(exact, prompt, tokens[:size])
        assert np.array_equal(single, batch), f"a batch of {size} is not single steps"


def test_an_exact_targets_steps_do_not_depend_on_the_thread_count(
        exact: LlamaModel, smol_path: Path) -> None:
    prompt, tokens = random_context(1)
    two, _ = single_and_batch(exact, prompt, tokens)
    with backend.load_model(smol_path, n_ctx=2048, n_threads=1, n_gpu_layers=0,
                            exact=True) as one_thread:
        one, _ = single_and_batch(one_thread, prompt, tokens)
    assert np.array_equal(one, two)


def test_negative_control_a_plain_target_differs_there(smol_path: Path) -> None:
    prompt, tokens = random_context(0)
    with backend.load_model(smol_path, n_ctx=2048, n_threads=THREADS, n_gpu_layers=0,
                            flash_attn=True) as plain:
        assert plain.exact_rows is None
        differ = [not np.array_equal(*single_and_batch(plain, prompt, tokens[:size]))
                  for size in (2, 3)]
    assert all(differ), "the split-KV path did not show: this control checks nothing"


def test_exactness_needs_flash_attention_and_the_cpu(smol_path: Path) -> None:
    with backend.load_model(smol_path, n_ctx=256, n_gpu_layers=0, flash_attn=False,
                            exact=True) as model:
        assert model.exact_rows is None and model.flash_attn is False
        model.set_flash_attn(None)  # calibration puts it back on: exact again
        assert model.exact_rows == 3 and model.flash_attn is True


def test_greedy_answers_past_the_split_equal_plain_decoding_token_for_token(
        exact: LlamaModel, real_model_path: Callable[[str], Path],
        tmp_path: Path) -> None:
    q2 = files.requantize(real_model_path("smollm2-135m"), tmp_path / "q2.gguf", "Q2_K")
    # A long document first, so every answer decodes past 512 cached positions.
    document = " ".join(PROMPTS) * 6
    with backend.load_model(q2, n_ctx=2048, n_gpu_layers=0) as draft:
        for text in PROMPTS[:8]:
            prompt = prompt_of(exact, f"{document}\n\n{text}")
            assert len(prompt) > 520
            off = answer(exact, prompt, GenerationOptions(max_tokens=48, spec="off"))
            for mode in ("draft", "ngram", "auto"):
                spec = answer(exact, prompt, GenerationOptions(max_tokens=48, spec=mode,
                                                               draft_max=2), draft)
                at = common_prefix(off.tokens, spec.tokens)
                assert spec.tokens == off.tokens, f"{mode} left off's answer at token {at}"


def test_after_a_prefill_moved_from_a_plain_context_greedy_answers_still_equal_off(
        exact: LlamaModel, real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    q2 = files.requantize(real_model_path("smollm2-135m"), tmp_path / "q2.gguf", "Q2_K")
    document = " ".join(PROMPTS) * 8
    exact.truncate(0)  # an earlier test's cache would be reused, and nothing filled cold
    moved = exact.side_fills
    prompt = prompt_of(exact, f"{document}\n\n{PROMPTS[0]}")  # a minute per prompt here
    assert len(prompt) >= 600
    off = answer(exact, prompt, GenerationOptions(max_tokens=32, spec="off"))
    with backend.load_model(q2, n_ctx=2048, n_gpu_layers=0) as draft:
        for mode in ("draft", "ngram"):
            spec = answer(exact, prompt, GenerationOptions(max_tokens=32, spec=mode,
                                                           draft_max=2), draft)
            at = common_prefix(off.tokens, spec.tokens)
            assert spec.tokens == off.tokens, f"{mode} left off's answer at token {at}"
    assert exact.side_fills > moved, "no prefill went through the plain context"


def test_after_a_prefill_moved_past_cached_tokens_greedy_answers_still_equal_off(
        exact: LlamaModel, real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    q2 = files.requantize(real_model_path("smollm2-135m"), tmp_path / "q2.gguf", "Q2_K")
    prompt = prompt_of(exact, f"{' '.join(PROMPTS) * 8}\n\n{PROMPTS[1]}")
    warm = 300  # cached first, as an earlier turn would leave it; the rest is a long prefill
    assert len(prompt) - warm >= 600
    moved = exact.side_fills

    def from_warm(mode: str, draft: LlamaModel | None = None) -> list[int]:
        exact.truncate(0)
        exact.eval(prompt[:warm], [-1])
        options = GenerationOptions(max_tokens=32, spec=mode, draft_max=2)
        return list(answer(exact, prompt, options, draft).tokens)

    off = from_warm("off")
    with backend.load_model(q2, n_ctx=2048, n_gpu_layers=0) as draft:
        for mode in ("draft", "ngram"):
            spec = from_warm(mode, draft)
            assert spec == off, f"{mode} left off's answer at token {common_prefix(off, spec)}"
    assert exact.side_fills == moved + 3, "not every long prefill went through the plain context"
