"""Escape sequences from models, servers, saved conversations, hub file names and file names
reach a real terminal (tmux) shown, never obeyed; pipes and files stay exact.

Each terminal test runs a shell script in a tmux server of its own with clipboard escapes
turned on (tests/support/hostile.py): an obeyed OSC 52 would leave a paste buffer holding "pwned",
an obeyed OSC 2 would rename the pane, an obeyed screen clear would wipe earlier lines.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.chat.chatlog import conversation_files, load_conversation
from specchat.term.safe import visible
from tests.support import hostile
from tests.support.fakehub import FakeHub, serve
from tests.support.tmux import Terminal

ROOT = Path(__file__).resolve().parents[2]
FAKE = f"{shlex.quote(sys.executable)} -m tests.support.chat_fake_cli"
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_visible_keeps_text_newlines_and_tabs_and_shows_every_other_control() -> None:
    assert visible(hostile.HOSTILE) == hostile.SHOWN
    assert visible("a\tb\nc — ü 中") == "a\tb\nc — ü 中"
    assert visible("\r\b\x7f\x9b\u202e\ud800") == "^M^H^?<U+009B><U+202E><U+D800>"
    assert "\x1b" not in visible("".join(chr(c) for c in range(0x10000)))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    hub = tmp_path / "hub" / "models--evil--repo" / "snapshots" / "abc"
    hub.mkdir(parents=True)
    (hub / f"x{hostile.CLIPBOARD}{hostile.TITLE}.gguf").write_bytes(b"GGUF")
    return {**os.environ, "PYTHONPATH": str(ROOT), "SPECCHAT_HOME": str(tmp_path / "home"),
            "SPECCHAT_CACHE": str(tmp_path / "models"), "HF_HUB_CACHE": str(tmp_path / "hub"),
            "SPECCHAT_NO_HUB": "1", "CHAT_FAKE_ANSWER": hostile.HOSTILE, "TERM": "xterm-256color",
            "NO_COLOR": ""}


@pytest.fixture
def terminal(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[Terminal, Path]]:
    term = Terminal(f"specchat-esc-{os.getpid()}-{tmp_path.name}")
    yield term, tmp_path
    term.close()


def _run_script(term: Terminal, tmp: Path, env: dict[str, str], lines: list[str]
                ) -> str:
    """Run the lines in the tmux terminal (env as the tmux server's); the final screen."""
    script = tmp / "run.sh"
    script.write_text(f"cd {shlex.quote(str(ROOT))}\n" + "\n".join(lines) + "\necho ALL-DONE\n")
    term.start(f"sh {shlex.quote(str(script))}", env)
    return term.wait_for("ALL-DONE", timeout=180)


def _assert_not_obeyed(term: Terminal, screen: str, *markers: str) -> None:
    assert term.clipboard() == "", "an OSC 52 reached the terminal: the clipboard was written"
    assert term.title() == "untouched", "an OSC 2 reached the terminal: the title changed"
    for marker in markers:  # nothing was cleared away
        assert marker in screen, screen


@needs_tmux
@pytest.mark.slow
def test_answers_errors_and_names_are_shown_not_obeyed_in_a_terminal(
        terminal: tuple[Terminal, Path], env: dict[str, str]) -> None:
    term, tmp = terminal
    missing = shlex.quote(f"{tmp}/no{hostile.CLIPBOARD}such")
    hub_files = {"evil/x-GGUF": {f"x{hostile.CLIPBOARD}{hostile.TITLE}-Q4_K_M.gguf":
                                 b"GGUF" + bytes(500)}}
    with hostile.endpoint() as url, serve(FakeHub(hub_files)) as hub:
        env = {**env, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp / "hf")}
        env.pop("SPECCHAT_NO_HUB")
        screen = _run_script(term, tmp, env, [
            "echo STEP-ask", f"{FAKE} ask hi",
            "echo STEP-plain", f"echo hi | {FAKE} chat --plain",
            "echo STEP-nocolor", f"echo hi | NO_COLOR=1 {FAKE} chat",
            "echo STEP-rich", f"echo hi | {FAKE} chat",
            "echo STEP-history", f"{FAKE} history", f"{FAKE} history show last",
            f"{FAKE} history search before",
            "echo STEP-file", f"{FAKE} ask -f {missing} hi",
            "echo STEP-remote", f"{FAKE} ask --endpoint {url} -m fake hi",
            f"{FAKE} ask --endpoint {url} -m fake fail",
            "echo STEP-models", f"{FAKE} models",
            "echo STEP-pull", f"{FAKE} pull evil/x-GGUF",
        ])
    _assert_not_obeyed(term, screen, "STEP-ask", "STEP-rich", "STEP-models")
    sections = screen.split("STEP-")
    for section in sections[1:6]:  # ask, chat --plain, NO_COLOR, rich chat, history
        assert hostile.SHOWN in section, section
    assert "history" in sections[5] and sections[5].count("before ^[]52") >= 3
    assert f"{tmp}/no^[]52;c;cHduZWQ=^Gsuch: no such file" in sections[6]
    assert hostile.SHOWN in sections[7] and f"refused {hostile.SHOWN}" in sections[7]
    # A hub name with control bytes is never a path in the cache
    # (tests/models/test_hub_hostile.py): it is left out of listings, and pull refuses the repo in
    # one line without obeying anything.
    assert "pwned-title" not in sections[8] and "Hugging Face cache" in sections[8]
    assert "pwned-title" not in sections[9], sections[9]


def test_pipes_and_files_get_the_exact_bytes(tmp_path: Path, env: dict[str, str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "tests.support.chat_fake_cli", *args],
                              input=stdin.encode(), env=env, cwd=ROOT, capture_output=True,
                              check=True, timeout=120)

    assert run("ask", "hi").stdout == (hostile.HOSTILE + "\n").encode()
    assert run("chat", stdin="hi").stdout == (hostile.HOSTILE + "\n").encode()
    monkeypatch.setenv("SPECCHAT_HOME", env["SPECCHAT_HOME"])
    turn = load_conversation(conversation_files()[0]).turns[0]
    assert turn.assistant == hostile.HOSTILE  # saved exactly as the model said it
    assert hostile.HOSTILE in run("history", "show", "last").stdout.decode()
    run("history", "export", "last", "-o", str(tmp_path / "out.md"))
    assert hostile.HOSTILE in (tmp_path / "out.md").read_text()


@needs_tmux
@pytest.mark.slow
def test_an_interactive_chat_and_its_replay_show_escapes_in_a_real_terminal(
        terminal: tuple[Terminal, Path], env: dict[str, str]) -> None:
    term, tmp = terminal
    term.start(f"cd {shlex.quote(str(ROOT))} && {FAKE} chat; echo EXIT=$?", env)
    term.wait_for("/help for commands")
    term.keys("first question", "Enter")
    term.wait_for("first token")
    term.leave("EXIT=0")
    term.keys(f"{FAKE} chat --continue; echo AGAIN=$?", "Enter")  # replays the saved turn
    term.wait_for(">>> first question")
    term.wait_for("/help for commands")
    screen = term.leave("AGAIN=0")
    _assert_not_obeyed(term, screen, "first question")
    assert screen.count("before ^[]52;c;cHduZWQ=^G") >= 2, screen

