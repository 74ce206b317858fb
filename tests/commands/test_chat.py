"""`specchat chat` and `specchat history` through the CLI, on the fake chat model.

In-process runs patch open_runtime; the kill -9 and terminal tests run the real CLI in a
separate process through tests/support/chat_fake_cli.py (same CLI, fake model loaded).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.chat.chatlog import conversation_files, load_conversation
from specchat.commands import chat as chat_cmd
from tests.support import chat_fakes as f
from tests.support.clirun import FakeStdin, run_cli
from tests.support.tmux import Terminal

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    made: dict[str, Any] = {"tmp": tmp_path, "error": None}

    def open_fake(settings: Any) -> Any:
        made["settings"] = settings
        if made["error"] is not None:
            raise made["error"]
        made["runtime"] = f.runtime()
        return made["runtime"]

    monkeypatch.setattr(chat_cmd, "open_runtime", open_fake)
    yield made


def run(args: list[str], stdin: bytes, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", FakeStdin(stdin))
    return run_cli(args, capsys)


def test_piped_stdin_is_one_answer(home, capsys, monkeypatch) -> None:  # type: ignore
    code, out, err = run(["chat", "-n", "12"], b"hello\n", capsys, monkeypatch)
    turns = load_conversation(conversation_files()[0]).turns
    assert code == 0 and out == turns[0].assistant + "\n" and err == ""
    assert turns[0].user == "hello" and home["settings"].quiet
    assert home["settings"].draft_on_demand  # a draft auto cannot use waits for /mode draft
    # The context starts at what the first answer can need (12 tokens, no 4,096).
    from specchat.backend.local import TEMPLATE_ROOM
    assert TEMPLATE_ROOM + 12 < home["settings"].ctx_start < TEMPLATE_ROOM + 200


def test_empty_stdin_exits_quietly(home, capsys, monkeypatch) -> None:  # type: ignore
    assert run(["chat"], b"", capsys, monkeypatch) == (0, "", "")
    assert "settings" not in home  # no model was even loaded


def test_continue_and_load(home, capsys, monkeypatch) -> None:  # type: ignore
    assert run(["chat", "--continue"], b"x", capsys, monkeypatch)[0] == 2
    run(["chat", "-n", "8", "-s", "be brief"], b"one", capsys, monkeypatch)
    run(["chat", "-n", "8", "--continue"], b"two", capsys, monkeypatch)
    files = conversation_files()
    assert len(files) == 1
    conv = load_conversation(files[0])
    assert [t.user for t in conv.turns] == ["one", "two"] and conv.system == "be brief"
    code, _, _ = run(["chat", "-n", "8", "--load", str(files[0])], b"three", capsys,
                     monkeypatch)
    assert code == 0 and len(conversation_files()) == 2
    newest = load_conversation(conversation_files()[0])
    assert [t.user for t in newest.turns] == ["one", "two", "three"]
    assert len(load_conversation(files[0]).turns) == 2
    code, _, err = run(["chat", "--continue", "--load", str(files[0])], b"x", capsys,
                       monkeypatch)
    assert code == 2 and "give one" in err


def test_load_of_a_missing_or_bad_file(home, capsys, monkeypatch) -> None:  # type: ignore
    code, _, err = run(["chat", "--load", str(home["tmp"] / "nope.jsonl")], b"x", capsys,
                       monkeypatch)
    assert code == 2 and "no conversation file" in err and "Traceback" not in err
    bad = home["tmp"] / "bad.jsonl"
    bad.write_text("not json at all\n")
    code, _, err = run(["chat", "--load", str(bad)], b"x", capsys, monkeypatch)
    assert code == 2 and "not a specchat conversation" in err


def test_history_lists_newest_first(home, capsys, monkeypatch) -> None:  # type: ignore
    code, out, err = run(["history"], b"", capsys, monkeypatch)
    assert code == 0 and out == "" and "no saved conversations" in err
    run(["chat", "-n", "4"], b"first chat", capsys, monkeypatch)
    time.sleep(0.01)
    run(["chat", "-n", "4"], b"second chat", capsys, monkeypatch)
    os.utime(conversation_files()[-1], (1, 1))  # make the order unambiguous
    code, out, _ = run(["history"], b"", capsys, monkeypatch)
    lines = out.splitlines()
    assert code == 0 and "second chat" in lines[0] and "first chat" in lines[2]
    assert "1 turns" in lines[0] and "fake" in lines[0]


def test_bad_option_is_a_usage_error(home, capsys, monkeypatch) -> None:  # type: ignore
    code, out, err = run(["chat", "--top-p", "3"], b"hi", capsys, monkeypatch)
    assert code == 2 and out == "" and "top_p" in err


def test_verbose_logs_the_traceback_and_prints_where(home, capsys, monkeypatch) -> None:  # type: ignore
    home["error"] = RuntimeError("llama exploded")
    code, out, err = run(["chat", "--verbose"], b"hi", capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    log = next((home["tmp"] / "state" / "logs").glob("*.log"))
    assert f"verbose log: {log}" in err and f"details in {log}" in err
    assert "RuntimeError: llama exploded" in log.read_text() and "Traceback" in log.read_text()
    code, _, err = run(["chat"], b"hi", capsys, monkeypatch)
    assert code == 1 and "rerun with --verbose" in err and "Traceback" not in err


def _fake_cli(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.support.chat_fake_cli", *args], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def test_kill_9_mid_answer_loses_only_that_answer(tmp_path: Path) -> None:
    env = {"SPECCHAT_HOME": str(tmp_path), "CHAT_FAKE_DELAY": "0"}
    for i, args in enumerate((["chat", "-n", "10"], ["chat", "-n", "10", "--continue"])):
        proc = _fake_cli(args, env, stdin=subprocess.PIPE)
        out, err = proc.communicate(f"question {i}".encode(), timeout=60)
        assert proc.returncode == 0, err
    slow = _fake_cli(["chat", "-n", "400", "--continue"], {**env, "CHAT_FAKE_DELAY": "0.05"},
                     stdin=subprocess.PIPE)
    assert slow.stdin is not None and slow.stdout is not None
    slow.stdin.write(b"question 2")
    slow.stdin.close()
    assert slow.stdout.read(5)  # the answer is streaming now
    slow.send_signal(signal.SIGKILL)
    slow.wait(timeout=30)
    path = _only_file(tmp_path)
    assert [t.user for t in load_conversation(path).turns] == ["question 0", "question 1"]
    proc = _fake_cli(["chat", "-n", "10", "--continue"], env, stdin=subprocess.PIPE)
    proc.communicate(b"question 3", timeout=60)
    assert [t.user for t in load_conversation(path).turns] == [
        "question 0", "question 1", "question 3"]


def _only_file(home: Path) -> Path:
    files = list((home / "state" / "conversations").glob("*.jsonl"))
    assert len(files) == 1
    return files[0]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_terminal_session_under_tmux(tmp_path: Path) -> None:
    """A real terminal: --continue shows earlier turns, Ctrl-C mid-answer, then on an empty
    line (exit 130). Ctrl-D (exit 0) is checked by the real-model terminal test."""
    env = {"SPECCHAT_HOME": str(tmp_path), "CHAT_FAKE_DELAY": "0"}
    proc = _fake_cli(["chat", "-n", "10"], env, stdin=subprocess.PIPE)
    proc.communicate(b"earlier question", timeout=60)
    term = Terminal(f"specchat-test-{os.getpid()}-{tmp_path.name}")
    try:
        term.start(f"cd {ROOT} && {sys.executable} -m tests.support.chat_fake_cli chat "
                   "--continue -n 200; echo EXIT=$?",
                   {**os.environ, "SPECCHAT_HOME": str(tmp_path), "CHAT_FAKE_DELAY": "0.03"},
                   width=120, height=40)
        term.wait_for(">>> earlier question")
        assert "/help for commands" in term.wait_for("/help for commands")
        term.keys("hello there", "Enter")
        time.sleep(1.0)
        term.keys("C-c")
        term.wait_for("interrupted")
        term.keys("/stats", "Enter")
        term.wait_for("answers      1 (1 interrupted)")
        term.keys("typed but abandoned", "C-c")  # clears the line only
        term.keys("C-c")
        screen = term.wait_for("EXIT=130")
        assert "error" not in screen  # leaving with Ctrl-C is not an error
        assert "Traceback" not in screen
    finally:
        term.close()
    turns = load_conversation(_only_file(tmp_path)).turns
    assert [t.user for t in turns] == ["earlier question", "hello there"]
    assert turns[1].interrupted



def test_private_chat_writes_nothing(home, capsys, monkeypatch) -> None:  # type: ignore
    from specchat.backend.draftstore import DraftStore

    def open_with_store(settings: Any) -> Any:
        home["settings"] = settings
        runtime = f.runtime()
        runtime.store = DraftStore(home["tmp"] / "drafts", "v" * 16, 1 << 20,
                                   writable=not settings.private)
        return runtime

    monkeypatch.setattr(chat_cmd, "open_runtime", open_with_store)
    code, out, _ = run(["chat", "-n", "12", "--private"], b"hello\n", capsys, monkeypatch)
    assert code == 0 and out.strip() and home["settings"].private
    assert not any(p.is_file() for p in home["tmp"].rglob("*"))  # no file at all
    code, _, _ = run(["chat", "-n", "12"], b"hello\n", capsys, monkeypatch)
    kept = DraftStore(home["tmp"] / "drafts", "v" * 16, 1 << 20).usage()
    assert code == 0 and conversation_files() and kept[2] == 1  # not private: both kept
