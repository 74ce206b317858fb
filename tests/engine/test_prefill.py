"""The prefill on a fake model: chunks, progress, restore hook, first-token time, Ctrl-C
between chunks; the progress line and the summary line that report it."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence

import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.drafters import PREFILL_CHUNK, fill_cache
from specchat.engine.events import Finished, Progress
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.engine.stats import Stats
from specchat.term.progress import PrefillProgress, progress_text
from specchat.term.summary import summary_line
from tests.support.fakes import FakeModel

OFF = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=5, spec="off")


def long_prompt(n: int) -> list[int]:
    return [(i * 7) % 31 for i in range(n)]


def ticking(step: float = 0.5) -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += step


def test_fill_cache_cuts_at_chunk_multiples_after_a_cached_prefix() -> None:
    model = FakeModel(n_vocab=32, n_ctx=2048)
    tokens = long_prompt(1000)
    model.eval(tokens[:300], [-1])
    model.eval_calls.clear()
    seen: list[tuple[int, int]] = []
    assert fill_cache(model, tokens, chunk=256, progress=lambda d, t: seen.append((d, t))) == 700
    assert model.eval_calls == [212, 256, 232]  # 300->512->768->1000
    assert seen == [(212, 700), (468, 700), (700, 700)]
    assert list(model.tokens) == tokens


def test_progress_reports_every_chunk_and_the_first_token_time_is_recorded() -> None:
    model = FakeModel(n_vocab=32, n_ctx=4096)
    prompt = long_prompt(3 * PREFILL_CHUNK + 10)
    clock = ticking()
    seen: list[Progress] = []
    hooks = Hooks(clock=lambda: next(clock), progress=seen.append)
    events = list(generate(model, prompt, OFF, hooks=hooks))
    assert [p.done for p in seen] == [PREFILL_CHUNK, 2 * PREFILL_CHUNK, 3 * PREFILL_CHUNK,
                                      len(prompt) - 1]
    assert {p.total for p in seen} == {len(prompt) - 1}
    assert [p.seconds for p in seen] == sorted(p.seconds for p in seen) and seen[0].seconds > 0
    fin = events[-1]
    assert isinstance(fin, Finished)
    stats = fin.stats
    assert stats.prompt_evaluated == len(prompt) - 1
    # The first token comes after the prefill, and within the same clock.
    assert stats.first_token_seconds > stats.prompt_seconds > 0
    assert stats.prompt_tokens_per_second == pytest.approx(
        (len(prompt) - 1) / stats.prompt_seconds)


def test_restore_hook_runs_first_and_counts_as_cached() -> None:
    model = FakeModel(n_vocab=32, n_ctx=4096)
    prompt = long_prompt(700)
    calls: list[Sequence[int]] = []

    def restore(tokens: Sequence[int]) -> int:
        calls.append(list(tokens))
        model.eval(list(tokens[:600]), [-1])  # what loading a saved state does
        return 600

    fin = list(generate(model, prompt, OFF, hooks=Hooks(restore=restore)))[-1]
    assert isinstance(fin, Finished)
    assert calls == [prompt[:-1]]
    assert fin.stats.prompt_restored == 600
    assert fin.stats.prompt_cached == 600
    assert fin.stats.prompt_evaluated == 99


def test_ctrl_c_between_chunks_leaves_a_consistent_prefix() -> None:
    model = FakeModel(n_vocab=32, n_ctx=4096)
    prompt = long_prompt(3 * PREFILL_CHUNK)

    def interrupt(progress: Progress) -> None:
        if progress.done >= 2 * PREFILL_CHUNK:
            raise KeyboardInterrupt

    events = generate(model, prompt, OFF, hooks=Hooks(progress=interrupt))
    with pytest.raises(KeyboardInterrupt):
        next(events)
    assert list(model.tokens) == prompt[: 2 * PREFILL_CHUNK]
    # The next call reuses what is there and evaluates only the rest.
    model.eval_calls.clear()
    fin = list(generate(model, prompt, OFF))[-1]
    assert isinstance(fin, Finished) and fin.stats.prompt_cached == 2 * PREFILL_CHUNK


def test_progress_line_waits_a_second_and_clears_itself() -> None:
    out = io.StringIO()
    line = PrefillProgress(out, enabled=True)
    line(Progress(256, 3000, 0.4))
    assert out.getvalue() == ""
    line(Progress(512, 3000, 1.6))
    assert "reading the prompt 512/3000 tokens (17%, 320 tok/s)" in out.getvalue()
    line.clear()
    assert out.getvalue().endswith("\r\x1b[K")
    assert "\n" not in out.getvalue()


def test_progress_line_is_silent_off_a_terminal() -> None:
    out = io.StringIO()  # isatty() is False, like a pipe or a log file
    line = PrefillProgress(out)
    line(Progress(512, 3000, 5.0))
    line.clear()
    assert out.getvalue() == ""


def test_progress_text_of_an_empty_prefill() -> None:
    assert "0/0 tokens (100%, 0 tok/s)" in progress_text(Progress(0, 0, 0.0))


def test_summary_line_reports_prompt_speed_and_first_token() -> None:
    stats = Stats(prompt_tokens=3001, prompt_cached=0, prompt_seconds=30.0,
                  first_token_seconds=30.2, generated=4, decode_seconds=0.4, steps=4)
    line = summary_line(stats, "length")
    assert "prompt 3001 tok in 30.00s (100 tok/s)" in line
    assert "first token 30.20s" in line
    cached = Stats(prompt_tokens=3001, prompt_cached=2990, prompt_seconds=0.5,
                   first_token_seconds=0.6)
    line = summary_line(cached)
    assert "prompt 3001 tok (2990 cached) in 0.50s · first token 0.60s" in line
    assert "tok/s)" not in line.split("first token")[0]  # 10 tokens: no speed to speak of


def test_abort_flag_turns_sigint_into_an_abort_and_then_a_keyboard_interrupt() -> None:
    import os
    import signal

    from specchat.llm.hooks import AbortFlag

    flag = AbortFlag()
    with flag.armed() as armed:
        assert armed and flag(None) is False
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # Python runs the handler between bytecodes
            if flag.interrupted:
                break
        assert flag(None) is True  # what llama.cpp's abort callback answers now
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        flag.raise_pending_interrupt()
    assert flag(None) is False
    flag.raise_pending_interrupt()  # nothing pending: no exception


def test_abort_flag_leaves_someone_elses_sigint_handler_alone() -> None:
    import signal

    from specchat.llm.hooks import AbortFlag

    def mine(_signum: int, _frame: object) -> None:
        return None

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with AbortFlag().armed() as armed:
            assert not armed
            assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)
