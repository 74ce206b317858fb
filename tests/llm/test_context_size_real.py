"""A context that starts small (a one-shot answer's, a chat's first turn) and widens, its cache
moved across: the same logits as a context made full-size at once, on real GGUF files, and an
answer whose prompt outgrew the first guess is the answer a full-size runtime gives."""

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
def test_a_widened_context_keeps_its_cache_and_computes_what_a_full_size_one_does(
        real_model_path: Callable[[str], Path], name: str) -> None:
    path = real_model_path(name)
    with load_model(path, n_ctx=2048, n_gpu_layers=0, n_threads=1) as full, \
            load_model(path, n_ctx=2048, n_gpu_layers=0, n_threads=1, ctx_start=100) as small:
        assert (small.n_ctx, small.ctx_limit, full.n_ctx) == (512, 2048, 2048)
        tokens = full.tokenize(shared_text(), add_special=True, parse_special=False)[:700]
        with pytest.raises(ContextFullError):
            small.eval(tokens, [])
        for model in (small, full):
            model.eval(tokens[:400], [])
        small.widen(len(tokens) + 1)
        # At least twice what it held, and the cache moved across, not evaluated again.
        assert small.n_ctx == 1024 and list(small.tokens) == tokens[:400]
        assert small.cached_positions() == 400
        rows = [0, 150, 299]
        assert np.array_equal(small.eval(tokens[400:], rows), full.eval(tokens[400:], rows))
        small.widen(10_000)
        assert small.n_ctx == 2048 and list(small.tokens) == tokens
        for t in (11, 12, 13):
            assert np.array_equal(small.eval([t], [0]), full.eval([t], [0]))
        small.widen(20)
        assert small.n_ctx == 2048


@pytest.mark.parametrize("exact", [False, True])  # exact: a long prefill fills a side context
def test_an_answer_whose_prompt_outgrew_the_first_context_is_the_full_size_answer(
        real_model_path: Callable[[str], Path], exact: bool) -> None:
    path = real_model_path("smollm2-135m")
    settings = LoadSettings(model=str(path), spec="off", n_ctx=2048, n_gpu_layers=0,
                            quiet=True, threads=1, exact=exact)
    messages = [{"role": "user", "content": f"{shared_text()}\n\nWhat does this do?"}]
    answers = []
    for start in (None, 600):
        with open_runtime(LoadSettings(**{**settings.__dict__, "ctx_start": start})) as runtime:
            tokens = runtime.fitting(runtime.chat_tokens(messages))
            assert runtime.n_ctx == 2048 and len(tokens) > 600
            finished = list(runtime.stream(tokens, GREEDY))[-1]  # widened first
            assert runtime.target.n_ctx >= len(tokens) + GREEDY.max_tokens
            assert runtime.target.exact == exact and (runtime.target.side_fills > 0) == exact
            assert isinstance(finished, Finished)
            answers.append(finished.tokens)
    assert answers[0] == answers[1]


def test_a_conversation_that_outgrows_its_context_keeps_its_cache(
        real_model_path: Callable[[str], Path]) -> None:
    path = real_model_path("smollm2-135m")
    with open_runtime(LoadSettings(model=str(path), spec="off", n_ctx=4096, n_gpu_layers=0,
                                   quiet=True, threads=1, ctx_start=600)) as runtime:
        messages = [{"role": "user", "content": "Say one word."}]
        first = list(runtime.answer(messages, GREEDY))[-1]
        assert isinstance(first, Finished) and runtime.target.n_ctx == 768
        messages += [{"role": "assistant", "content": first.text},
                     {"role": "user", "content": f"{shared_text()}\n\nWhat does this do?"}]
        second = list(runtime.answer(messages, GREEDY))[-1]
        assert isinstance(second, Finished) and runtime.target.n_ctx >= 1536
        # The first turn was moved into the wider context, not read again.
        assert second.stats.prompt_cached >= first.stats.prompt_tokens


def test_a_draft_of_another_vocabulary_gets_the_whole_context_at_its_first_answer(
        real_model_path: Callable[[str], Path]) -> None:
    # Its tokens for the same text may be several times the target's: sized by the target's
    # count it would run out of room and stop drafting part way through a long prompt.
    target, draft = real_model_path("smollm2-135m"), real_model_path("gemma3-270m")
    with open_runtime(LoadSettings(model=str(target), draft=str(draft), spec="draft",
                                   n_ctx=2048, n_gpu_layers=0, quiet=True, threads=1,
                                   ctx_start=600)) as runtime:
        assert runtime.vocabs is not None and runtime.draft is not None
        messages = [{"role": "user", "content": "Say one word."}]
        finished = list(runtime.answer(messages, GREEDY))[-1]
        assert isinstance(finished, Finished)
        assert runtime.target.n_ctx == 768
        assert runtime.draft.n_ctx == 2048
