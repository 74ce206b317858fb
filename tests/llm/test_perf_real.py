"""The llama.cpp knobs the performance work turns, on a real GGUF file (SmolLM2-135M):
flash attention chosen per context, threads per call, and llama-cpp-python's own chat
completion as the bench's baseline. Results only: nothing here is timed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specchat.bench import prompts as bp
from specchat.bench.peer import PEER, ChatCompletionPeer

llama_cpp = pytest.importorskip("llama_cpp",
                              reason="llama-cpp-python is not installed (see backends/)")
backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")

pytestmark = pytest.mark.real
PROMPT = "The quick brown fox jumps over the lazy dog. In 1969, humans first walked on the"


@pytest.fixture(scope="module")
def smol_path(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("smollm2-135m")


def test_flash_attention_and_threads_change_the_cost_not_the_answer(smol_path: Path) -> None:
    with backend.load_model(smol_path, n_ctx=256, n_threads=1, flash_attn=False) as model:
        assert model.flash_attn is False
        tokens = model.tokenize(PROMPT, add_special=True)
        off = model.eval(tokens, [len(tokens) - 1])[0]
        model.set_flash_attn(True)
        assert model.flash_attn is True and list(model.tokens) == []  # a fresh cache
        model.set_threads(2)
        on = model.eval(tokens, [len(tokens) - 1])[0]
        assert model.cached_positions() == len(tokens)
        assert int(np.argmax(on)) == int(np.argmax(off))
        # Another attention kernel: the same distribution up to rounding (measured: 0.66 of
        # a logit at most on this prompt).
        assert np.max(np.abs(on - off)) < 1.0


def test_chat_completion_peer_answers_greedily_and_counts_every_token(smol_path: Path) -> None:
    llm = files.plain_chat_llama(smol_path, n_ctx=512, n_threads=1, n_gpu_layers=0)
    try:
        peer = ChatCompletionPeer(llm)
        prompt = bp.BenchPrompt("p", "qa", "What is the capital of France?")
        first = peer.run(prompt, 0, max_tokens=12, seed=1)
        again = peer.run(prompt, 1, max_tokens=12, seed=1)
    finally:
        llm.close()
    assert first.mode == PEER and 0 < first.generated <= 12
    assert first.tokens == again.tokens  # greedy, from an empty cache each time
    assert first.prompt_tokens > 10 and first.first_tokens == 1
    assert first.text.strip()  # the streamed text came through
    assert first.last_chunk_seconds >= first.first_chunk_seconds
