"""The one-shot CLI on fake models: exact stdout, stderr for everything else, exit codes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from specchat import cli
from specchat.commands import ask as ask_cmd
from tests.support.clirun import FakeStdin, run_cli
from tests.support.fake_runtime import chat_encode, fake_model, fake_runtime, plain_answer


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run_cli(args, capsys)


def test_plain_stdout_is_exactly_the_answer(fake_ask_runtime: dict, capsys: Any) -> None:
    code, out, err = run(["ask", "hello", "-n", "7", "--spec", "off"], capsys)
    want = plain_answer("hello", 7)
    assert code == 0
    assert out == want.text + ("" if want.text.endswith("\n") else "\n")
    assert err == ""


def test_bare_prompt_routes_to_ask(fake_ask_runtime: dict, capsys: Any) -> None:
    code, out, _ = run(["hello", "-n", "7"], capsys)
    assert code == 0
    assert out.rstrip("\n") == plain_answer("hello", 7).text.rstrip("\n")


def test_json_is_one_object_with_stats(fake_ask_runtime: dict, capsys: Any) -> None:
    code, out, err = run(["ask", "hello", "-n", "5", "--json", "--spec", "off"], capsys)
    assert code == 0 and err == ""
    obj = json.loads(out)
    want = plain_answer("hello", 5)
    assert obj["text"] == want.text
    assert obj["tokens"] == list(want.tokens)
    assert obj["finish_reason"] == "length"
    assert obj["stats"]["generated"] == 5


def test_one_answer_in_one_mode_lets_auto_leave_out_a_draft_that_cannot_pay(
        fake_ask_runtime: dict, capsys: Any) -> None:
    fake_ask_runtime["draft"] = fake_model(seed=3)
    for mode in ("auto", "draft"):
        code, out, _ = run(["ask", "hello", "-n", "3", "--json", "--spec", mode], capsys)
        settings = fake_ask_runtime["settings"]
        assert code == 0 and settings.draft_on_demand and settings.spec == mode
        assert "draft_not_loaded" in json.loads(out)  # why not, when it was left out


def test_a_one_shot_answer_opens_a_context_sized_to_its_prompt_and_first_answer_room(
        fake_ask_runtime: dict, capsys: Any) -> None:
    from specchat.backend.local import FIRST_ANSWER, TEMPLATE_ROOM

    code, _, _ = run(["ask", "héllo", "-n", "100", "-s", "be brief"], capsys)
    settings = fake_ask_runtime["settings"]
    # Bytes bound tokens: 6 + 8 bytes of text, the template's room, 100 tokens, one draft.
    assert code == 0 and 6 + 8 + TEMPLATE_ROOM + 100 < settings.ctx_start < 1400
    code, _, _ = run(["ask", "x" * 5000, "-n", "100"], capsys)
    assert fake_ask_runtime["settings"].ctx_start > 5000
    # A long --max-tokens is not paid for up front: the context grows if the answer does.
    code, _, _ = run(["ask", "hello", "-n", "3000"], capsys)
    assert code == 0
    assert TEMPLATE_ROOM + FIRST_ANSWER < fake_ask_runtime["settings"].ctx_start < 1400


def test_speculative_modes_print_the_same_greedy_answer(fake_ask_runtime: dict,
                                                        capsys: Any) -> None:
    fake_ask_runtime["draft"] = fake_model(seed=3)
    outs = {m: run(["ask", "hello world", "-n", "12", "--spec", m], capsys)[1]
            for m in ("off", "draft", "ngram", "auto")}
    assert len(set(outs.values())) == 1


def test_stdin_first_then_prompt(fake_ask_runtime: dict, capsys: Any,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"diff text\n"))
    code, out, _ = run(["ask", "summarise", "-n", "4", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["text"] == plain_answer("diff text\n\nsummarise", 4).text


def test_non_utf8_stdin_is_replaced_with_a_warning(fake_ask_runtime: dict, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"caf\xe9 latte"))
    code, _, err = run(["ask", "-n", "2"], capsys)
    assert code == 0
    assert "not valid UTF-8" in err


def test_stats_go_to_stderr(fake_ask_runtime: dict, capsys: Any) -> None:
    code, out, err = run(["ask", "hi", "-n", "3", "--stats"], capsys)
    assert code == 0
    assert "tok/s" in err and "tok/s" not in out


@pytest.mark.parametrize("args, needle", [
    (["ask"], "empty prompt"),
    (["ask", "   "], "empty prompt"),
    (["ask", "hi", "--temperature", "-1"], "temperature"),
    (["ask", "hi", "--top-p", "0"], "top_p"),
    (["ask", "hi", "--spec", "magic"], "spec"),
    (["ask", "hi", "--spec", "draft"], "draft model"),
    (["ask", "hi", "--ctx", "8"], "--ctx"),
])
def test_bad_input_is_one_line_and_exit_2(fake_ask_runtime: dict, capsys: Any,
                                          args: list[str], needle: str) -> None:
    code, out, err = run(args, capsys)
    assert code == 2, err
    assert out == ""
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_prompt_longer_than_context_says_how_many_over(fake_ask_runtime: dict, capsys: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ask_cmd, "open_runtime",
                        lambda s: fake_runtime(target=fake_model(n_ctx=64)))
    code, out, err = run(["ask", "x" * 100], capsys)
    assert code == 2 and out == ""
    assert "over" in err and "--ctx" in err


def test_ctrl_c_mid_answer_exits_130_and_keeps_cache_consistent(
        fake_ask_runtime: dict, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    target = fake_model()
    original = target.eval
    calls = {"n": 0}

    def interrupting_eval(tokens: Any, rows: Any) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return original(tokens, rows)

    target.eval = interrupting_eval  # type: ignore[method-assign]
    monkeypatch.setattr(ask_cmd, "open_runtime", lambda s: fake_runtime(target=target))
    code, out, err = run(["ask", "hello", "-n", "50", "--spec", "off"], capsys)
    assert code == 130
    assert "interrupted" in err
    prompt = chat_encode([{"role": "user", "content": "hello"}])
    assert list(target.tokens[: len(prompt)]) == prompt
    generated = list(target.tokens[len(prompt):])
    assert generated == list(plain_answer("hello", 50).tokens[: len(generated)])


def test_unknown_option_is_a_usage_error(fake_ask_runtime: dict, capsys: Any) -> None:
    code, out, err = run(["ask", "hi", "--bogus"], capsys)
    assert code == 2 and out == ""
    assert "No such option" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, tty, command", [
    ([], True, "chat"),
    ([], False, "ask"),
    (["-m", "smollm2-135m"], True, "chat"),  # options alone in a terminal: chat with them
    (["-m", "smollm2-135m", "hi"], True, "ask"),
    (["-m", "smollm2-135m"], False, "ask"),  # piped: one-shot
    (["write", "a", "poem"], True, "ask"),
    (["models"], True, "models"),
])
def test_routing_without_a_command(argv: list[str], tty: bool, command: str) -> None:
    routed = cli.route_argv(argv, tty)
    assert routed[0] == command
    assert routed[-len(argv):] == argv if argv else True


def test_options_come_from_the_environment(fake_ask_runtime: dict, capsys: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_MAX_TOKENS", "3")
    monkeypatch.setenv("SPECCHAT_SPEC", "ngram")
    code, out, _ = run(["ask", "hello", "--json"], capsys)
    assert code == 0
    obj = json.loads(out)
    assert obj["stats"]["generated"] == 3 and obj["stats"]["mode"] == "ngram"
    monkeypatch.setenv("SPECCHAT_TEMPERATURE", "-2")
    code, _, err = run(["ask", "hello"], capsys)
    assert code == 2 and "temperature" in err
