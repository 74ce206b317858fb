"""SIGTERM (a kill) and SIGHUP (the terminal closed) during an answer keep the turn, partial
answer and all, marked interrupted, as Ctrl-C does; the chat then leaves with 128 + the signal's
number. Real processes of the CLI (the fake chat model, and one real GGUF model for a signal
during llama.cpp's prefill), and a real terminal under tmux."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.chat.chatlog import load_conversation
from specchat.chat.conversation import Turn
from tests.support.sourcetext import long_source_file
from tests.support.tmux import Terminal

ROOT = Path(__file__).resolve().parents[2]
FAKE = f"{shlex.quote(sys.executable)} -m tests.support.chat_fake_cli"
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _turns(home: Path) -> list[Turn]:
    files = list((home / "state" / "conversations").glob("*.jsonl"))
    assert len(files) == 1, files
    return load_conversation(files[0]).turns


def _env(home: Path, delay: str = "0") -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SPECCHAT_HOME": str(home),
            "CHAT_FAKE_DELAY": delay}


def _terminal(tmp_path: Path) -> Terminal:
    return Terminal(f"specchat-sig-{os.getpid()}-{tmp_path.name}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_answer_saves_the_partial_turn(tmp_path: Path, sig: int) -> None:
    env = _env(tmp_path, delay="0.05")
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.chat_fake_cli", "chat",
                             "-n", "400"],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(b"a question")
    proc.stdin.close()
    shown = proc.stdout.read(5)  # the answer is streaming now
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 128 + sig
    shown += proc.stdout.read()
    assert "Traceback" not in proc.stderr.read().decode()
    [turn] = _turns(tmp_path)
    assert turn.user == "a question" and turn.interrupted
    assert turn.assistant and shown.decode().startswith(turn.assistant)


@needs_tmux
@pytest.mark.slow
def test_closing_the_terminal_mid_answer_keeps_the_turn(tmp_path: Path) -> None:
    term, env = _terminal(tmp_path), _env(tmp_path, delay="0.05")
    try:
        term.start(f"cd {shlex.quote(str(ROOT))} && {FAKE} chat -n 8", env)
        term.wait_for("/help for commands")
        term.keys("first question", "Enter")
        term.wait_for("tok ·")
        term.keys("/set max_tokens 400", "Enter")
        term.wait_for("max_tokens = 400")
        term.keys("second question", "Enter")
        time.sleep(1.5)  # some of the answer is out (20 tokens a second)
    finally:
        term.close()  # the terminal goes away: SIGHUP
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_turns(tmp_path)) < 2:
        time.sleep(0.2)
    first, second = _turns(tmp_path)
    assert first.user == "first question" and not first.interrupted
    assert second.user == "second question" and second.interrupted and second.assistant


def _pid_of(term: Terminal) -> int:
    """The process id the shell printed before exec'ing the chat (`echo PID=$$`)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"PID=(\d+)", term.screen())
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    raise AssertionError(term.screen())


@needs_tmux
@pytest.mark.slow
def test_a_kill_before_the_first_word_still_keeps_the_question(tmp_path: Path) -> None:
    term, env = _terminal(tmp_path), _env(tmp_path, delay="5")
    try:
        term.start(f"cd {shlex.quote(str(ROOT))} && sh -c 'echo PID=$$; exec {FAKE} chat'; "
                   "echo EXIT=$?", env)
        pid = _pid_of(term)
        term.wait_for("/help for commands")
        term.keys("an unanswered question", "Enter")
        term.wait_for("reading the prompt")  # the model is still on the prompt
        os.kill(pid, signal.SIGTERM)
        screen = term.wait_for("EXIT=143")
    finally:
        term.close()
    assert "EXIT=143" in screen and "Traceback" not in screen
    [turn] = _turns(tmp_path)
    assert turn.user == "an unanswered question" and turn.interrupted and turn.assistant == ""


@needs_tmux
@pytest.mark.real
def test_sigterm_during_a_long_real_prefill_ends_at_once_and_keeps_the_question(
        real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    path = real_model_path("smollm2-135m")
    long_file = long_source_file(tmp_path / "long.txt")
    term, env = _terminal(tmp_path), _env(tmp_path / "home")
    try:
        term.start(f"cd {shlex.quote(str(ROOT))} && sh -c 'echo PID=$$; exec "
                   f"{shlex.quote(sys.executable)} -m specchat chat -m {path} --spec off "
                   f"--ctx 8192 -f {long_file}'; echo EXIT=$?", env)
        pid = _pid_of(term)
        term.wait_for("/help for commands", timeout=180)
        term.keys("what is this", "Enter")
        term.wait_for("reading the prompt", timeout=180)
        os.kill(pid, signal.SIGTERM)
        screen = term.wait_for("EXIT=143", timeout=60)
    finally:
        term.close()
    assert "EXIT=143" in screen and "Traceback" not in screen
    [turn] = _turns(tmp_path / "home")
    assert turn.user == "what is this" and turn.interrupted
    assert [a.name for a in turn.attachments] == [str(long_file)]
