"""Ctrl-C and small messages on the fake models, in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specchat.commands import ask as ask_cmd
from specchat.commands import chat as chat_cmd
from tests.support import chat_fakes as f
from tests.support.clirun import FakeStdin, run_cli
from tests.support.fake_runtime import fake_model, fake_runtime


def _interrupting(model: Any, after: int) -> Any:
    original = model.eval
    calls = {"n": 0}

    def eval_(tokens: Any, rows: Any) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == after:
            raise KeyboardInterrupt
        return original(tokens, rows)

    model.eval = eval_
    return model


def test_ctrl_c_in_an_answer_says_interrupted_once(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    target = _interrupting(fake_model(), 4)
    monkeypatch.setattr(ask_cmd, "open_runtime", lambda s: fake_runtime(target=target))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    code, _, err = run_cli(["ask", "hello", "-n", "50", "--spec", "off"], capsys)
    assert code == 130
    assert err.count("interrupted") == 1 and err.count("\n") == 1


def test_ctrl_c_outside_an_answer_is_one_line_and_130(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def loading(settings: Any) -> Any:
        raise KeyboardInterrupt  # as while a model loads

    monkeypatch.setattr(ask_cmd, "open_runtime", loading)
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    code, out, err = run_cli(["ask", "hello"], capsys)
    assert (code, out, err) == (130, "", "specchat: error: interrupted\n")


def test_piped_chat_interrupted_says_so_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    model = f.ChatModel()
    model.interrupt_after_calls = 6
    monkeypatch.setattr(chat_cmd, "open_runtime", lambda s: f.runtime(model))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"hello"))
    code, _, err = run_cli(["chat", "-n", "40"], capsys)
    assert code == 130 and err.count("interrupted") == 1


def test_history_with_a_zero_limit_says_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr(chat_cmd, "open_runtime", lambda s: f.runtime())
    monkeypatch.setattr("sys.stdin", FakeStdin(b"a question"))
    assert run_cli(["chat", "-n", "4"], capsys)[0] == 0
    code, out, err = run_cli(["history", "-n", "0"], capsys)
    assert code == 2 and out == ""
    assert "no saved conversations" not in err and "at least 1" in err


def test_seed_is_checked_in_one_place() -> None:
    from specchat.engine.options import GenerationOptions, OptionError, SamplingOptions
    from specchat.settings.schema import BY_NAME

    assert SamplingOptions(seed=-1).seed is None  # -1 is random, as in llama.cpp
    assert GenerationOptions().with_values(seed=-1).sampling.seed is None  # /set seed -1
    assert SamplingOptions(seed=7).seed == 7
    with pytest.raises(OptionError, match="seed"):
        SamplingOptions(seed=-2)
    assert BY_NAME["seed"].from_text("-1") == -1  # /set, env and config pass it on
    with pytest.raises(OptionError, match="seed must be >= 0"):
        BY_NAME["seed"].from_text("-2")  # ... and the schema asks SamplingOptions


def test_drain_closes_the_stream_however_the_consumer_leaves() -> None:
    from collections.abc import Generator

    from specchat.engine.build import generate
    from specchat.engine.events import Chunk, Event, drain
    from specchat.engine.options import GenerationOptions

    model = fake_model()
    options = GenerationOptions(max_tokens=30, spec="ngram")
    closed: list[int] = []

    def engine() -> Generator[Event, None, None]:
        try:
            yield from generate(model, [1, 2, 3], options)
        finally:
            closed.append(len(model.tokens))  # the engine's cleanup has run by now

    def stop(chunk: Chunk) -> None:
        raise KeyboardInterrupt  # Ctrl-C (or a closed pipe) while printing the first chunk

    with pytest.raises(KeyboardInterrupt) as info:
        drain(engine(), stop)
    # Closed before the exception left drain (the traceback still holds the frames, so the
    # garbage collector could not have done it): the models can be closed right after.
    assert len(closed) == 1 and info.value.__traceback__ is not None
    finished = drain(engine())
    assert finished is not None and finished.reason in ("eog", "length") and len(closed) == 2
