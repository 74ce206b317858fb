"""Every file a user names is read bounded: a device, a FIFO nobody writes to or a file past
the limit is one usage error line (exit 2), never gigabytes of memory or a hang."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = [
    (["ask", "--schema", "{path}", "hi"], "schema"),
    (["bench", "--recording", "{path}", "--cost-profile", "cpu-2core-qwen1.5b"], "recording"),
    (["bench", "--cost-profile", "{path}"], "cost profile"),
    (["bench", "--sessions", "{path}"], "JSON Lines"),
    (["bench", "{path}"], ".jsonl"),
]


def _bounded() -> None:
    """2 GiB of address space: a command that reads /dev/zero whole fails fast, not the box."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _specchat(tmp_path: Path, argv: list[str], *, typed: str = "") -> \
        subprocess.CompletedProcess[str]:
    """The real CLI under a fresh home and a 2 GiB memory limit, `typed` on its stdin."""
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "specchat", *argv], env=env, timeout=60,
                          capture_output=True, text=True, input=typed, preexec_fn=_bounded,
                          check=False)


def _fake_target(tmp_path: Path) -> Path:
    """A file that passes the model file check, for commands that fail before loading it."""
    target = tmp_path / "target.gguf"
    target.write_bytes(b"GGUF\x03\x00\x00\x00")
    return target


@pytest.mark.parametrize("kind", ["device", "fifo"])
@pytest.mark.parametrize(("args", "names"), COMMANDS)
def test_a_device_or_a_fifo_is_refused_in_one_line(tmp_path: Path, kind: str,
                                                   args: list[str], names: str) -> None:
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    done = _specchat(tmp_path, [a.replace("{path}", str(path)) for a in args])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and names in done.stderr
    assert ("a character device" if kind == "device" else "a FIFO") in done.stderr


MODEL_COMMANDS = [
    ["ask", "-m", "{path}", "hi"],
    ["ask", "-m", "{target}", "--draft", "{path}", "hi"],
    ["chat", "-m", "{path}"],
    ["bench", "-m", "{path}", "--limit", "1"],
]
KINDS = {"device": "a character device", "null": "a character device", "fifo": "a FIFO",
         "folder": "a folder"}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("args", MODEL_COMMANDS)
def test_a_model_path_that_is_no_file_says_what_it_is(tmp_path: Path, kind: str,
                                                      args: list[str]) -> None:
    path = {"device": Path("/dev/zero"), "null": Path("/dev/null"), "fifo": tmp_path / "pipe",
            "folder": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    target = _fake_target(tmp_path)  # the draft is checked before the target loads
    argv = [a.replace("{path}", str(path)).replace("{target}", str(target)) for a in args]
    done = _specchat(tmp_path, argv, typed="hi\n")  # chat's question
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"{path} is {KINDS[kind]}, not a model file; give a path to a .gguf file" \
        in done.stderr


@pytest.mark.parametrize(("args", "hint"), [
    (["ask", "-m", "{target}", "-f", "/dev/zero", "hi"], "attach a text file or a pipe"),
    (["chat", "-m", "{target}", "--load", "/dev/zero"], "give a conversation file"),
])
def test_a_device_given_as_a_text_file_says_what_to_give(tmp_path: Path, args: list[str],
                                                         hint: str) -> None:
    target = _fake_target(tmp_path)  # the files are read before the target loads
    done = _specchat(tmp_path, [a.replace("{target}", str(target)) for a in args],
                     typed="hi\n")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "/dev/zero" in done.stderr and "a character device" in done.stderr
    assert hint in done.stderr


def test_a_fifo_among_saved_conversations_is_passed_over_without_blocking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.chat import chatlog

    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    folder = chatlog.conversations_dir()
    folder.mkdir(parents=True)
    os.mkfifo(folder / "20260101-000000.jsonl")
    assert _returns(lambda: chatlog.has_records(folder / "20260101-000000.jsonl"),
                    folder / "20260101-000000.jsonl") is False


def test_a_schema_file_past_the_limit_is_refused_in_the_chat_too(tmp_path: Path) -> None:
    from specchat.chat import commands
    from tests.support import chat_fakes as f

    big = tmp_path / "big.json"
    with big.open("wb") as out:
        out.truncate(64 << 20)  # sparse: 64 MiB of nothing
    chat, _ = f.session(tmp_path)
    with pytest.raises(UsageError, match="too large"):  # the REPL shows it as one line
        commands.dispatch(chat, f"/set schema {big}")
    assert chat.options.structure is None


def _returns(call: Callable[[], object], fifo: Path) -> object:
    """What `call` returns, failing (and unblocking it) if it blocks on `fifo`."""
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(call()), daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"reading {fifo.name} blocked on a FIFO")
    return got[0]


def test_cache_files_that_are_fifos_count_as_missing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.models import cache, hfcache
    from specchat.paths import hub_records_file

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    refs = hfcache.repo_dir("me/x-GGUF") / "refs"
    refs.mkdir(parents=True)
    (refs.parent / "snapshots" / "abc").mkdir(parents=True)
    os.mkfifo(refs / "main")
    assert _returns(lambda: hfcache.snapshots("me/x-GGUF", "main"), refs / "main") == \
        [refs.parent / "snapshots" / "abc"]
    hub_records_file().parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(hub_records_file())
    assert _returns(hfcache.load_records, hub_records_file()) == {}
    model = tmp_path / "m.gguf"
    os.mkfifo(cache.sidecar_path(model))
    assert _returns(lambda: cache.recorded_sha256(model), cache.sidecar_path(model)) is None


def test_hashing_a_model_file_never_opens_a_fifo_in_its_place(tmp_path: Path) -> None:
    from specchat.fileio import FileIOError
    from specchat.llm.gguf import content_fingerprint
    from specchat.models.cache import sha256_file

    fifo = tmp_path / "m.gguf"  # the model file, replaced after it was checked and loaded
    os.mkfifo(fifo)

    def refused(hash_it: Callable[[Path], str]) -> str:
        try:
            return hash_it(fifo)
        except FileIOError as exc:
            return str(exc)

    assert "is a FIFO" in str(_returns(lambda: refused(content_fingerprint), fifo))
    assert "is a FIFO" in str(_returns(lambda: refused(sha256_file), fifo))


@pytest.mark.parametrize("flag", ["--json", "--record"])
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_bench_output_that_is_no_regular_file_is_refused_before_the_run(
        tmp_path: Path, flag: str, kind: str) -> None:
    path = Path("/dev/zero")
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    # The target would fail to load: the refusal has to come before any model is opened.
    done = _specchat(tmp_path, ["bench", "-m", str(_fake_target(tmp_path)), flag, str(path),
                                "--limit", "1"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert flag in done.stderr and str(path) in done.stderr
    assert ("a character device" if kind == "device" else "a FIFO") in done.stderr
