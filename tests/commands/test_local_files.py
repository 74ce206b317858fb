"""How specchat writes and reads the user's files.

Writers never replace what is not a regular file (a device node, a FIFO) and write through a
symlinked file to its target; readers are bounded and never block on a FIFO; a read-only or
full state directory costs one line, never the chat; a full stdout is one line and exit 1.
Through the real CLI (subprocesses), prompt-toolkit's pipe input, and a real terminal (tmux)
with real read-only and full file systems (tmpfs mounts in a private mount namespace).
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.chat.chatlog import load_conversation
from tests.support import chat_fakes as f
from tests.support.replkeys import CTRL_D, ENTER, drive
from tests.support.tmux import Terminal

ROOT = Path(__file__).resolve().parents[2]
FAKE = f"{shlex.quote(sys.executable)} -m tests.support.chat_fake_cli"
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True,
                           check=False)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not _can_mount(), reason="needs a private mount namespace "
                                  "(unshare --mount as root) for real read-only/full disks")


def _private_mounts(mounts: list[str], command: str) -> str:
    """`command` run where each of `mounts` (a shell line) has been mounted, for it only."""
    inner = " && ".join([*mounts, f"exec {command}"])
    return f"unshare --mount --propagation private sh -c {shlex.quote(inner)}"


def _cli(args: list[str], env: dict[str, str], stdin: bytes = b"", timeout: float = 60,
         memory: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI (with the fake chat model) in a process of its own; `memory` caps its
    address space, since today's unbounded reads would fill the machine's memory."""
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    done = subprocess.run([sys.executable, "-m", "tests.support.chat_fake_cli", *args], input=stdin,
                          env=env, cwd=ROOT, capture_output=True, timeout=timeout,
                          check=False, preexec_fn=limit)
    return subprocess.CompletedProcess(done.args, done.returncode,
                                       done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SPECCHAT_HOME": str(tmp_path / "home"),
            "SPECCHAT_CACHE": str(tmp_path / "models"), "SPECCHAT_NO_HUB": "1",
            "CHAT_FAKE_DELAY": "0"}


def _one_conversation(env: dict[str, str]) -> None:
    done = _cli(["chat", "-n", "8"], env, stdin=b"hello there")
    assert done.returncode == 0, done.stderr


def _device_node(path: Path) -> bool:
    """A character device like /dev/null at `path` (root only); False when not allowed."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        return False
    return True


def _one_error_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


# --- never replace a device or a FIFO; write through symlinks -------------------------------
def test_export_refuses_a_fifo_or_a_device_even_with_force(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    _one_conversation(env)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = _cli(["history", "export", "last", "-o", str(fifo), "--force"], env)
    _one_error_line(done, 1, str(fifo), "is a FIFO, not a regular file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    node = tmp_path / "device"
    if _device_node(node):
        done = _cli(["history", "export", "last", "-o", str(node), "--force"], env)
        _one_error_line(done, 1, "is a character device, not a regular file")
        assert stat.S_ISCHR(node.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["home", "pipe"] + (["device"] if node.exists() else []))  # no temporary file left


def test_export_through_a_symlink_writes_its_target_and_keeps_the_link(
        tmp_path: Path, env: dict[str, str]) -> None:
    _one_conversation(env)
    (tmp_path / "notes").mkdir()
    target = tmp_path / "notes" / "chat.md"
    target.write_text("old\n")
    link = tmp_path / "chat.md"
    link.symlink_to(target)
    done = _cli(["history", "export", "last", "-o", str(link), "--force"], env)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "hello there" in target.read_text()


def test_save_settings_through_a_dotfiles_symlink_updates_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "specchat.toml"
    real.write_text("# mine\ntop_k = 7\n\n[profile.code]\nmax_tokens = 99\n")
    config = tmp_path / "config.toml"
    config.symlink_to(real)
    monkeypatch.setenv("SPECCHAT_CONFIG", str(config))
    session, streams = f.session(tmp_path)
    keys = "/set temperature 0.5" + ENTER + "/save-settings" + ENTER + CTRL_D
    assert drive(session, keys, None) == 0
    assert "error" not in streams.take()[1]
    assert config.is_symlink() and os.readlink(config) == str(real)
    text = real.read_text()
    saved = tomllib.loads(text)
    assert text.startswith("# mine") and saved["temperature"] == 0.5
    assert saved["profile"] == {"code": {"max_tokens": 99}}


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    gone = subprocess.Popen(["true"])  # a process id whose process has ended
    gone.wait()
    stale = tmp_path / f".config.toml.{gone.pid}.0123abcd.tmp"  # what a kill -9 leaves
    stale.write_text("half a file")
    other = tmp_path / f".other.toml.{gone.pid}.0123abcd.tmp"  # another file's: left alone
    other.write_text("x")
    monkeypatch.setenv("SPECCHAT_CONFIG", str(config))
    session, streams = f.session(tmp_path)
    assert drive(session, "/save-settings" + ENTER + CTRL_D, None) == 0
    assert not stale.exists() and other.exists() and config.exists()


# --- bounded reads, no FIFO hangs --------------------------------------------------------
def test_attaching_a_link_to_dev_zero_is_refused_at_once(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    link = tmp_path / "notes.txt"
    link.symlink_to("/dev/zero")
    for command in (["ask", "-f", str(link), "hi"], ["chat", "-f", str(link)]):
        done = _cli(command, env, stdin=b"question", memory=2 << 30, timeout=120)
        _one_error_line(done, 2, f"{link}: is a character device, not a regular file")


def test_a_config_file_that_is_a_device_or_a_fifo_is_one_line(tmp_path: Path,
                                                              env: dict[str, str]) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    for config in ("/dev/zero", str(fifo)):
        done = _cli(["config"], {**env, "SPECCHAT_CONFIG": config}, memory=2 << 30,
                    timeout=60)
        _one_error_line(done, 2, config, "not a regular file")


def test_loading_a_device_as_a_conversation_is_one_line(env: dict[str, str]) -> None:
    done = _cli(["chat", "--load", "/dev/zero"], env, stdin=b"hi", memory=2 << 30,
                timeout=60)
    _one_error_line(done, 2, "/dev/zero", "is a character device")


def test_attaching_a_pipe_still_works(tmp_path: Path, env: dict[str, str]) -> None:
    script = (f"{FAKE} ask -n 4 -f <(printf 'diff --git a b') 'review' && "
              f"{FAKE} ask -n 4 -f <(head -c 20000000 /dev/zero | tr '\\0' a) 'big'")
    done = subprocess.run(["bash", "-c", script], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr  # the first answers; the second is too large
    assert done.stdout.strip() and done.stderr.count("\n") == 1
    assert "is too large (more than 16 MiB)" in done.stderr


@needs_tmux
@pytest.mark.slow
def test_save_commands_refuse_fifos_and_devices_in_a_terminal_and_the_chat_goes_on(
        tmp_path: Path, env: dict[str, str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    node = tmp_path / "full"
    targets = [fifo] + ([node] if _device_node(node) else [])
    term = Terminal(f"specchat-files-{os.getpid()}-{tmp_path.name}")
    try:
        term.start(f"cd {shlex.quote(str(ROOT))} && {FAKE} chat -n 8; echo EXIT=$?", env)
        term.wait_for("/help for commands")
        for target in targets:
            for command in ("/save!", "/save-settings"):
                term.keys(f"{command} {target}", "Enter")
                term.wait_for(f"cannot write {target}", timeout=20)
        term.keys("still here", "Enter")
        term.wait_for("tok ·")
        screen = term.leave("EXIT=0")
    finally:
        term.close()
    assert screen.count("not a regular file") == 2 * len(targets), screen
    assert "Traceback" not in screen
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert all(not stat.S_ISREG(t.lstat().st_mode) for t in targets)


# --- read-only and full state directories -----------------------------------------------------
@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(f"specchat-files-{os.getpid()}-{tmp_path.name}")
    yield term
    term.close()


def _two_answers(terminal: Terminal, command: str, env: dict[str, str]) -> None:
    """Start the chat `command` in the terminal and have it answer twice."""
    terminal.start(f"cd {shlex.quote(str(ROOT))} && {command}; echo EXIT=$?", env)
    terminal.wait_for("/help for commands")
    terminal.keys("first", "Enter")
    terminal.wait_for("tok ·")
    terminal.keys("second", "Enter")
    terminal.wait_for("tok ·", count=2)


@needs_tmux
@needs_mounts
@pytest.mark.slow
def test_a_read_only_state_directory_says_so_once_and_the_chat_goes_on(
        tmp_path: Path, env: dict[str, str], terminal: Terminal) -> None:
    state = tmp_path / "home" / "state"
    state.mkdir(parents=True)
    config_dir = tmp_path / "etc"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text("top_k = 7\n")
    command = _private_mounts(
        [f"mount -t tmpfs -o ro,size=64k tmpfs {state}",
         f"mount --bind -o ro {config_dir} {config_dir}",
         f"mount -o remount,bind,ro {config_dir}"],
        f"{FAKE} chat -n 8")
    _two_answers(terminal, command, {**env, "SPECCHAT_CONFIG": str(config_dir / "config.toml")})
    terminal.keys("/save-settings", "Enter")
    terminal.wait_for("cannot write")
    screen = terminal.leave("EXIT=0")
    assert screen.count("turns will not be saved") == 1, screen
    assert "read-only file system" in screen and "not saved" not in screen
    assert "Traceback" not in screen and "Errno" not in screen and ".tmp" not in screen
    assert screen.count("tok ·") == 2  # both answered
    assert f"cannot write {config_dir / 'config.toml'}: read-only file system" in screen
    assert (config_dir / "config.toml").read_text() == "top_k = 7\n"


@needs_tmux
@needs_mounts
@pytest.mark.slow
def test_a_full_disk_under_the_input_history_is_one_line_and_the_chat_goes_on(
        tmp_path: Path, env: dict[str, str], terminal: Terminal) -> None:
    state = tmp_path / "home" / "state"
    state.mkdir(parents=True)
    command = _private_mounts(
        [f"mount -t tmpfs -o size=64k tmpfs {state}",
         f"mkdir -p {state}/conversations",
         f"(dd if=/dev/zero of={state}/filler bs=4k 2>/dev/null || true)"],
        f"{FAKE} chat -n 8")
    _two_answers(terminal, command, env)
    screen = terminal.leave("EXIT=0")
    assert screen.count("input history not kept") == 1, screen
    assert "no space left on device" in screen and "Traceback" not in screen
    assert screen.count("tok ·") == 2, screen  # both answered


# --- a full stdout is one line and exit 1 ---------------------------------------------------
@pytest.mark.parametrize("args", [["history"], ["history", "show", "last"],
                                  ["history", "search", "hello"], ["config"],
                                  ["config", "path"], ["models"], ["models", "--json"]])
def test_commands_writing_to_a_full_device_say_so_in_one_line(
        args: list[str], env: dict[str, str]) -> None:
    _one_conversation(env)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tests.support.chat_fake_cli", *args], env=env,
                              cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.endswith(
        "specchat: error: cannot write the answer to stdout: no space left on device\n")
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr


def test_a_chat_answering_into_a_full_device_keeps_the_turn_and_says_so(
        env: dict[str, str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tests.support.chat_fake_cli", "chat",
                               "-n", "8"],
                              input="a question", env=env, cwd=ROOT, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["specchat: error: cannot write the answer: no space "
                                        "left on device (the turn is saved)"]
    files = list((Path(env["SPECCHAT_HOME"]) / "state" / "conversations").glob("*.jsonl"))
    [turn] = load_conversation(files[0]).turns
    assert turn.user == "a question" and turn.interrupted


def test_an_input_history_that_is_a_device_is_not_read_and_the_chat_goes_on(
        tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.symlink_to("/dev/zero")  # read whole, this was a line without end
    session, streams = f.session(tmp_path)
    assert drive(session, "hello" + ENTER + "again" + ENTER + CTRL_D, history) == 0
    _, err = streams.take()
    assert err.count("input history not kept") == 1 and f"{history}:" in err
    assert [t.user for t in session.conversation.turns] == ["hello", "again"]
