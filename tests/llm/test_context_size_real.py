"""A context that starts small (a one-shot answer's) and widens: the same logits as a context
made full-size at once, on real GGUF files, and an answer whose prompt outgrew the first
guess is the answer a full-size runtime gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specchat.backend.loading import open_runtime
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.protocol import ContextFullError
from specchat.llm import load_model
from specchat.settings.load import LoadSettings
from tests.support.sourcetext import shared_text

pytestmark = pytest.mark.real
GREEDY = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=24, spec="off")


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_a_widened_context_computes_what_a_full_size_one_does(
        real_model_path: Callable[[str], Path], name: str) -> None:
    path = real_model_path(name)
    with load_model(path, n_ctx=2048, n_gpu_layers=0, n_threads=1) as full, \
            load_model(path, n_ctx=2048, n_gpu_layers=0, n_threads=1, ctx_start=100) as small:
        assert (small.n_ctx, small.ctx_limit, full.n_ctx) == (512, 2048, 2048)
        tokens = full.tokenize(shared_text(), add_special=True, parse_special=False)[:700]
        with pytest.raises(ContextFullError):
            small.eval(tokens, [])
        small.eval(tokens[:8], [])
        small.widen(len(tokens) + 1)
        assert small.n_ctx == 768 and not small.tokens  # rounded up; the cache starts over
        rows = [0, 511, 512, 699]  # both prefill chunks
        assert np.array_equal(small.eval(tokens, rows), full.eval(tokens, rows))
        steps = [small.eval([t], [0])[0] for t in (11, 12, 13)]
        assert all(np.array_equal(s, full.eval([t], [0])[0]) for s, t in zip(steps, (11, 12, 13)))
        small.widen(10_000)
        assert small.n_ctx == 2048 and not small.tokens
        small.widen(20)
        assert small.n_ctx == 2048


def test_an_answer_whose_prompt_outgrew_the_first_context_is_the_full_size_answer(
        real_model_path: Callable[[str], Path]) -> None:
    path = real_model_path("smollm2-135m")
    settings = LoadSettings(model=str(path), spec="off", n_ctx=2048, n_gpu_layers=0,
                            quiet=True, threads=1)
    messages = [{"role": "user", "content": f"{shared_text()}\n\nWhat does this do?"}]
    answers = []
    for start in (None, 600):
        with open_runtime(LoadSettings(**{**settings.__dict__, "ctx_start": start})) as runtime:
            tokens = runtime.fitting(runtime.chat_tokens(messages))
            assert runtime.n_ctx == 2048 and len(tokens) > 600
            runtime.make_room(len(tokens), GREEDY)
            assert runtime.target.n_ctx >= len(tokens) + GREEDY.max_tokens
            finished = list(runtime.stream(tokens, GREEDY))[-1]
            assert isinstance(finished, Finished)
            answers.append(finished.tokens)
    assert answers[0] == answers[1]
