"""Saved prompt states on a real model, and Ctrl-C during a real prefill in a real terminal."""

from __future__ import annotations

import os
import shutil
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specchat.backend.loading import open_runtime
from specchat.backend.local import Runtime
from specchat.backend.promptcache import PromptCache
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.llm import load_model
from specchat.settings.load import LoadSettings
from tests.support.sourcetext import long_source_file, shared_text
from tests.support.tmux import Terminal

pytestmark = pytest.mark.real
ROOT = Path(__file__).resolve().parents[2]
GREEDY = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=24, spec="off")


def test_a_loaded_state_gives_the_same_next_token_logits(
        real_model_path: Callable[[str], Path]) -> None:
    path = real_model_path("smollm2-135m")
    with load_model(path, n_ctx=2048, n_gpu_layers=0) as a, \
            load_model(path, n_ctx=2048, n_gpu_layers=0) as b:
        tokens = a.tokenize(shared_text(), add_special=True, parse_special=False)
        a.eval(tokens[:-1], [-1])
        blob = a.save_state()
        fresh = a.eval(tokens[-1:], [-1])[0]
        b.eval(tokens[:5], [-1])  # whatever b held before is replaced
        b.load_state(tokens[:-1], blob)
        assert list(b.tokens) == tokens[:-1]
        assert b.cached_positions() == len(tokens) - 1
        loaded = b.eval(tokens[-1:], [-1])[0]
        assert int(np.argmax(loaded)) == int(np.argmax(fresh))
        assert float(np.abs(loaded - fresh).max()) < 1e-3
        # A blob that is not a state leaves the model empty, not half loaded.
        with pytest.raises(Exception, match="does not fit"):
            b.load_state(tokens[:10], blob[:1000])
        assert not b.tokens and b.cached_positions() == 0



def test_a_state_is_held_once_in_memory_when_saved_restored_or_widened(
        real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    """A long context's state is hundreds of MB: saving it, writing it to the prompt cache,
    reading it back and moving it to a wider context each hold it once, not two or three
    copies at a time (what Python allocates, traced; llama.cpp's own cache is not)."""
    path = real_model_path("smollm2-135m")
    with load_model(path, n_ctx=4096, ctx_start=1024, n_gpu_layers=0) as model:
        tokens = model.tokenize(shared_text(), add_special=True, parse_special=False)[:900]
        model.eval(tokens, [-1])
        cache = PromptCache(tmp_path, limit=1 << 30, min_new_tokens=1)

        def peak(step: Callable[[], object]) -> int:
            tracemalloc.start()
            try:
                step()
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

        size = len(model.save_state())
        assert size > 5_000_000  # big enough for a copy to show
        assert peak(model.save_state) < 1.2 * size
        assert peak(lambda: cache.save(model, evaluated=len(tokens))) < 1.2 * size
        model.truncate(0)
        assert peak(lambda: cache.restore(model, [*tokens, 1])) < 1.2 * size
        assert list(model.tokens) == tokens
        assert peak(lambda: model.widen(2048)) < 1.2 * size
        assert list(model.tokens) == tokens and model.n_ctx >= 2048


def _answer(runtime: Runtime, question: str) -> Finished:
    tokens = runtime.chat_tokens([{"role": "user", "content": f"{shared_text()}\n\n{question}"}])
    runtime.target.truncate(0)  # a new process: nothing in the KV cache
    events = list(runtime.stream(tokens, GREEDY))
    finished = events[-1]
    assert isinstance(finished, Finished)
    runtime.remember_prompt(tokens, finished.stats)
    return finished


def test_second_question_reuses_the_saved_prefix_and_answers_the_same(
        real_model_path: Callable[[str], Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = real_model_path("smollm2-135m")
    # With flash attention on (llama.cpp's default on the CPU), 1 and 2 threads give logits
    # up to 0.58 apart and different greedy tokens at near-ties (docs/exactness.md). On a
    # busy machine the thread governor switches between them mid-answer, which made this
    # test fail once: the comparison is of the cache, so the thread count is held fixed.
    monkeypatch.setenv("SPECCHAT_FIXED_THREADS", "1")
    # Restoring a prefix evaluates the rest in smaller batches than a fresh prefill, so only
    # the batch-invariant target (exact) promises the same greedy tokens; the default may part
    # at a near-tie, which this test's source-code prompt once reached.
    with open_runtime(LoadSettings(model=str(path), spec="off", n_ctx=2048, n_gpu_layers=0,
                                   quiet=True, exact=True)) as runtime:
        plain = _answer(runtime, "What does _prefill do?")
        runtime.prompt_cache = PromptCache(tmp_path)
        first = _answer(runtime, "Which events does it yield?")
        assert first.stats.prompt_restored == 0
        assert len(list(tmp_path.glob("*.kv"))) == 1
        second = _answer(runtime, "What does _prefill do?")
    assert second.stats.prompt_restored > 900
    assert second.stats.prompt_evaluated < 30
    assert second.tokens == plain.tokens  # the greedy answer does not depend on the cache
    assert len(list(tmp_path.glob("*.kv"))) == 1  # a few new tokens are not worth an entry


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_ctrl_c_during_a_long_prefill_exits_130_with_one_line(
        real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    path = real_model_path("smollm2-135m")
    long_file = long_source_file(tmp_path / "long.txt")
    term = Terminal(f"specchat-prefill-{os.getpid()}-{tmp_path.name}")
    typed = (f"cd {ROOT} && {sys.executable} -m specchat ask -m {path} --spec off --ctx 8192 "
             f"'What is this?' < {long_file}; echo EXIT=$?; sleep 60")
    try:
        term.start(typed, {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"),
                           "PYTHONPATH": str(ROOT)}, width=150, height=30)
        term.wait_for("reading the prompt", timeout=180)
        term.keys("C-c")
        screen = term.wait_for("EXIT=", timeout=120, count=2)  # the typed line holds one
    finally:
        term.close()
    shown = screen.split(typed, 1)[1]  # what the command printed, after the line typed
    lines = [line for line in shown.splitlines() if line.strip()]
    assert lines == ["specchat: interrupted", "EXIT=130"], screen
    # Interrupted before its prefill was done: nothing saved.
    assert not list((tmp_path / "home").rglob("*.kv"))


def test_the_thread_count_changes_the_logits_only_with_flash_attention(
        real_model_path: Callable[[str], Path]) -> None:
    """Why the test above holds threads fixed: with flash attention on, llama.cpp's kernel
    for a single-token step (every plain decode step) splits the attention over the threads,
    so the thread governor's switch between 1 and 2 threads moves the logits (measured: up to
    0.58 on SmolLM2, 0.50 on Qwen2.5-Coder-1.5B; greedy tokens apart at a near-tie); with it
    off, or for batches, the thread count changes nothing, bit for bit."""
    path = real_model_path("smollm2-135m")
    for flash, differs in ((True, True), (False, False)):
        with load_model(path, n_ctx=2048, n_gpu_layers=0, n_threads=2, flash_attn=flash) as m:
            tokens = m.tokenize(shared_text(), add_special=True, parse_special=False)
            m.eval(tokens[:-1], [])
            steps, batches = [], []
            for threads in (1, 2, 1):  # one plain step on the same cached prompt
                m.set_threads(threads)
                steps.append(m.eval(tokens[-1:], [0]))
                m.truncate(len(tokens) - 1)
            for threads in (1, 2):  # a batch of 16 on the same shorter prompt
                m.set_threads(threads)
                m.truncate(len(tokens) - 17)
                batches.append(m.eval(tokens[-17:-1], list(range(16))))
        assert np.array_equal(steps[0], steps[2])  # the same thread count: bit for bit
        assert (not np.array_equal(steps[0], steps[1])) is differs, flash
        assert np.array_equal(batches[0], batches[1])
