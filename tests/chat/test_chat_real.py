"""The chat on the real SmolLM2-135M: a two-turn tmux session, KV reuse, kill -9.

The model comes through specchat's own pull code (tests/conftest.py); these tests skip when
llama-cpp-python, the model or tmux is not available. Run them with `pytest -m real -s` to
see the prompt-evaluation table.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.chat.chatlog import ChatLog, load_conversation
from specchat.chat.render import RenderConfig, Renderer
from specchat.chat.session import ChatSession
from specchat.engine.options import GenerationOptions, SamplingOptions

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
SUMMARY = re.compile(r"^\d+ tok · .*tok/s.*prompt \+\d+ tok", re.MULTILINE)


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path(MODEL)


def _env(home: Path, model: Path) -> dict[str, str]:
    # State goes to a temporary home; the model stays where the pull code put it.
    return {"SPECCHAT_HOME": str(home), "SPECCHAT_CACHE": str(model.parent)}


def test_second_turn_reuses_the_cache(smol: Path, tmp_path: Path) -> None:
    from specchat.backend.loading import open_runtime
    from specchat.settings.load import LoadSettings

    questions = ["What is the capital of France?", "And of Italy?",
                 "Name a famous painter.", "Which city did he live in?", "Thanks. Say bye."]
    out, err = io.StringIO(), io.StringIO()
    config = RenderConfig(rich=False, markdown=False, show_draft=False, summary=False)
    settings = LoadSettings(model=str(smol), spec="off", n_ctx=2048, threads=2, quiet=True)
    with open_runtime(settings) as rt:
        options = GenerationOptions(sampling=SamplingOptions(), max_tokens=24, spec="off")
        chat = ChatSession(runtime=rt, options=options, renderer=Renderer(config, out, err),
                           chatlog=ChatLog(tmp_path / "c.jsonl"))
        for q in questions:
            assert chat.ask(q) is not None
        prompts = chat.tally.prompts
        print("\nturn  prompt tokens  cached  evaluated  prompt ms")
        for p in prompts:
            print(f"{p.turn:>4}  {p.tokens:>13}  {p.cached:>6}  {p.tokens - p.cached:>9}  "
                  f"{p.seconds * 1000:>9.1f}")
        for before, after, q in zip(prompts, prompts[1:], questions[1:]):
            # Everything the previous prompt held is reused; what is evaluated is the new
            # question plus the previous answer (its tokens re-rendered), not the history.
            assert after.cached >= before.tokens
            question = len(rt.chat_tokens([{"role": "user", "content": q}]))
            assert after.tokens - after.cached <= question + 24 + 8
    assert err.getvalue() == ""


def _keys(session: str, *keys: str) -> None:
    subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", session],
                          capture_output=True, text=True).stdout


def _wait(session: str, ok: Callable[[str], bool], what: str, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = _screen(session)
        if ok(screen):
            return screen
        time.sleep(0.25)
    raise AssertionError(f"{what} never appeared on the screen:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_two_turn_chat_in_a_terminal(smol: Path, tmp_path: Path) -> None:
    name = f"specchat-real-{os.getpid()}"
    env = " ".join(f"{k}={v}" for k, v in _env(tmp_path, smol).items())
    cmd = (f"cd {ROOT} && {env} {sys.executable} -m specchat chat -m {MODEL} -n 32 "
           f"--spec ngram --threads 2; echo EXIT=$?; sleep 300")
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "50", cmd],
                   check=True)
    try:
        # Type only once the prompt is drawn (before that the tty would echo the keys).
        _wait(name, lambda s: "/help for commands" in s and ">>>" in s, "the prompt",
              timeout=120)
        _keys(name, "What is the capital of France?", "Enter")
        _wait(name, lambda s: len(SUMMARY.findall(s)) == 1, "the first summary")
        _keys(name, "Say that again in one short sentence.", "Enter")
        screen = _wait(name, lambda s: len(SUMMARY.findall(s)) == 2, "the second summary")
        _keys(name, "C-d")
        screen = _wait(name, lambda s: "EXIT=" in s, "the exit code", timeout=60)
        print("\n" + screen.rstrip())
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False)
    assert "EXIT=0" in screen and "Traceback" not in screen
    assert ">>> What is the capital of France?" in screen
    assert "ngram" in SUMMARY.findall(screen)[1]
    files = list((tmp_path / "state" / "conversations").glob("*.jsonl"))
    turns = load_conversation(files[0]).turns
    assert [t.user for t in turns] == ["What is the capital of France?",
                                       "Say that again in one short sentence."]
    assert all(t.assistant.strip() for t in turns)
    # What the terminal shows is the saved answer (first line, modulo Markdown layout).
    assert turns[0].assistant.strip().split()[0] in screen


def test_kill_9_mid_answer_then_continue(smol: Path, tmp_path: Path) -> None:
    env = {**os.environ, **_env(tmp_path, smol)}
    base = [sys.executable, "-m", "specchat", "chat", "-m", MODEL, "--threads", "2"]
    done = subprocess.run([*base, "-n", "8"], input=b"Say hello.", env=env, cwd=ROOT,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    proc = subprocess.Popen([*base, "-n", "400", "--continue"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"Write a long story about a cat.")
    proc.stdin.close()
    assert proc.stdout.read(1)  # the answer is streaming
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    files = list((tmp_path / "state" / "conversations").glob("*.jsonl"))
    assert len(files) == 1
    assert [t.user for t in load_conversation(files[0]).turns] == ["Say hello."]
    again = subprocess.run([*base, "-n", "8", "--continue"], input=b"Bye.", env=env, cwd=ROOT,
                           capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert [t.user for t in load_conversation(files[0]).turns] == ["Say hello.", "Bye."]
