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
        assert (small.allocated, small.n_ctx, full.allocated) == (512, 2048, 2048)
        tokens = full.tokenize(shared_text(), add_special=True, parse_special=False)[:700]
        with pytest.raises(ContextFullError):  # beyond n_ctx: refused, nothing changed
            small.eval([tokens[0]] * 2049, [])
        assert small.allocated == 512 and not small.tokens
        for model in (small, full):
            model.eval(tokens[:400], [])
        # 700 positions do not fit 512: eval widens first, to at least twice what it held,
        # the 400 cached moved across, not evaluated again.
        rows = [0, 150, 299]
        assert np.array_equal(small.eval(tokens[400:], rows), full.eval(tokens[400:], rows))
        assert small.allocated == 1024 and list(small.tokens) == tokens
        assert small.cached_positions() == 700
        small.widen(10_000)
        assert small.allocated == 2048 and list(small.tokens) == tokens
        for t in (11, 12, 13):
            assert np.array_equal(small.eval([t], [0]), full.eval([t], [0]))
        small.widen(20)
        assert small.allocated == 2048


@pytest.mark.parametrize(("spec", "exact"), [("off", False), ("ngram", False), ("ngram", True)])
def test_an_answer_that_outgrows_its_first_room_is_the_full_size_answer(
        real_model_path: Callable[[str], Path], spec: str, exact: bool) -> None:
    path = real_model_path("smollm2-135m")
    settings = LoadSettings(model=str(path), spec=spec, n_ctx=2048, n_gpu_layers=0,
                            quiet=True, threads=1, exact=exact)
    long = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=900,
                             spec=spec)
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    answers = []
    for start in (None, 100):
        with open_runtime(LoadSettings(**{**settings.__dict__, "ctx_start": start})) as runtime:
            finished = list(runtime.answer(messages, long))[-1]
            assert isinstance(finished, Finished)
            assert runtime.target.allocated == (2048 if start is None else 1024)
            answers.append(finished.tokens)
    assert len(answers[0]) > 600  # so the small one widened part way through the answer
    assert answers[0] == answers[1]


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
            assert runtime.target.allocated >= len(tokens) + GREEDY.max_tokens
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
        assert isinstance(first, Finished) and runtime.target.allocated == 768
        messages += [{"role": "assistant", "content": first.text},
                     {"role": "user", "content": f"{shared_text()}\n\nWhat does this do?"}]
        second = list(runtime.answer(messages, GREEDY))[-1]
        assert isinstance(second, Finished) and runtime.target.allocated >= 1536
        # The first turn was moved into the wider context, not read again.
        assert second.stats.prompt_cached >= first.stats.prompt_tokens


def test_a_draft_of_another_vocabulary_widens_for_its_own_tokens(
        real_model_path: Callable[[str], Path]) -> None:
    # It drafts the same text in its own tokens, here 3x the target's (CJK text in SmolLM2's
    # 49k vocabulary against Gemma's 262k): sized by the target's count, it would have run
    # out of room at once and drafted nothing.
    target, draft = real_model_path("gemma3-270m"), real_model_path("smollm2-135m")
    with open_runtime(LoadSettings(model=str(target), draft=str(draft), spec="draft",
                                   n_ctx=4096, n_gpu_layers=0, quiet=True, threads=1,
                                   ctx_start=100)) as runtime:
        assert runtime.vocabs is not None and runtime.draft is not None
        text = "这是一个测试。日本語のテキストです。" * 30
        messages = [{"role": "user", "content": f"{text}\n\nRepeat the first sentence."}]
        finished = list(runtime.answer(messages, GREEDY.with_values(spec="draft")))[-1]
        assert isinstance(finished, Finished)
        assert runtime.target.allocated < len(runtime.draft.tokens) <= runtime.draft.allocated
        assert finished.stats.drafted > 0
