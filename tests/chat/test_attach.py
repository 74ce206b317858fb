"""Files in the prompt: fencing, refusals (one line, exit 2), `ask -f`, `chat -f`, `-f -`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specchat.chat.attach import Attachment, compose, fence_for
from specchat.chat.chatlog import conversation_files, load_conversation
from specchat.commands import chat as chat_cmd
from tests.support import chat_fakes
from tests.support.clirun import FakeStdin, run_cli
from tests.support.fake_runtime import encode, plain_answer

ROOT = Path(__file__).resolve().parents[2]


def test_the_fence_outlasts_any_backticks_inside() -> None:
    assert fence_for("plain") == "```"
    assert fence_for("a ``` b") == "````"
    assert fence_for("`````` x ``") == "```````"
    block = Attachment("x.md", "```py\nprint(1)\n```").block()
    assert block == "File: x.md\n````\n```py\nprint(1)\n```\n````"
    assert compose([Attachment("a", "1\n"), Attachment("b", "")], "why?") == (
        "File: a\n```\n1\n```\n\nFile: b\n```\n```\n\nwhy?")


def test_ask_puts_files_before_the_prompt(fake_ask_runtime: dict, capsys: Any,
                                          tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "b.txt").write_text("beta")
    args = ["ask", "-n", "6", "--spec", "off", "-f", str(tmp_path / "a.txt"),
            "--file", str(tmp_path / "b.txt"), "compare"]
    code, out, err = run_cli(args, capsys)
    message = compose([Attachment(str(tmp_path / "a.txt"), "alpha\n"),
                       Attachment(str(tmp_path / "b.txt"), "beta")], "compare")
    assert code == 0 and err == ""
    assert out.rstrip("\n") == plain_answer(message, 6).text.rstrip("\n")
    code, out, err = run_cli([*args[:1], "--json", "--stats", *args[1:]], capsys)
    files = json.loads(out)["attachments"]
    assert [a["name"] for a in files] == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    assert all(a["tokens"] > 0 for a in files)
    assert f"attachments: {files[0]['tokens'] + files[1]['tokens']} tokens" in err


def test_dash_f_dash_reads_stdin_as_the_file(fake_ask_runtime: dict, capsys: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"piped text\n"))
    code, out, _ = run_cli(["ask", "-n", "5", "--spec", "off", "-f", "-", "summarise"], capsys)
    message = compose([Attachment("stdin", "piped text\n")], "summarise")
    assert code == 0 and out.rstrip("\n") == plain_answer(message, 5).text.rstrip("\n")
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    code, _, err = run_cli(["ask", "-f", "-", "x"], capsys)
    assert code == 2 and "stdin is a terminal" in err


def test_a_file_too_large_for_the_context(fake_ask_runtime: dict, capsys: Any,
                                          tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * 600)  # the fake context holds 512 tokens
    code, out, err = run_cli(["ask", "-f", str(tmp_path / "big.txt"), "hi"], capsys)
    tokens = len(encode(Attachment(str(tmp_path / "big.txt"), "x" * 600).block()))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"specchat: error: {tmp_path / 'big.txt'}: {tokens} tokens does not fit in a context "
        "of 512: raise --ctx or attach a smaller file"]


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"PK\x03\x04\x00\x00"), "looks binary (it has NUL bytes)"),
    (lambda p: p.write_bytes(b"\xff\xfe h\x00i"), "looks binary"),
    (lambda p: p.write_bytes(b"na\xefve"), "is not UTF-8 text"),
])
def test_bad_files_are_one_line_exit_2_before_any_model_loads(tmp_path: Path, make: Any,
                                                              message: str) -> None:
    target = tmp_path / "f"
    make(target)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECCHAT_HOME": str(tmp_path / "h"),
           "SPECCHAT_CACHE": str(tmp_path / "no-models"), "SPECCHAT_NO_HUB": "1"}
    for command in ("ask", "chat"):
        done = subprocess.run([sys.executable, "-m", "specchat", command, "-f", str(target),
                               "hi"][: 6 if command == "chat" else 7], input="question",
                              env=env, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"specchat: error: {target}: {message}")
        assert done.stderr.count("\n") == 1


@pytest.fixture
def chat_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr(chat_cmd, "open_runtime", lambda settings: chat_fakes.runtime())
    return tmp_path


def test_chat_f_is_saved_with_the_turn_and_continue_sees_it(chat_home: Path, capsys: Any,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    (chat_home / "code.py").write_text("def f(): pass\n")
    monkeypatch.setattr("sys.stdin", FakeStdin(b"explain"))
    code, out, _ = run_cli(["chat", "-n", "8", "-f", str(chat_home / "code.py")], capsys)
    turn = load_conversation(conversation_files()[0]).turns[0]
    assert code == 0 and turn.user == "explain"
    assert turn.attachments == [Attachment(str(chat_home / "code.py"), "def f(): pass\n")]
    monkeypatch.setattr("sys.stdin", FakeStdin(b"more"))
    code, _, _ = run_cli(["chat", "-n", "8", "--continue"], capsys)
    conversation = load_conversation(conversation_files()[0])
    assert conversation.messages()[0]["content"].startswith(f"File: {chat_home / 'code.py'}")
    code, out, _ = run_cli(["history", "show", "last"], capsys)
    assert "def f(): pass" in out and "explain" in out and "more" in out
    monkeypatch.setattr("sys.stdin", FakeStdin(b"x"))
    code, _, err = run_cli(["chat", "-f", "-"], capsys)
    assert code == 2 and "use `specchat ask -f -" in err
