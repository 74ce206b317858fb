"""What specchat writes about a user's conversations: never lost silently, never shared.

A full disk, a torn last line, two chats in one second, file modes, and /save over an
existing file. All on the fake chat model, with a real file system.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.chat import chatlog as chatlog_mod
from specchat.chat.chatlog import (
    ChatLog,
    conversation_files,
    conversation_summaries,
    latest_file,
    load_conversation,
    read_records,
)
from specchat.chat.commands import dispatch
from specchat.errors import SpecchatError, UsageError
from tests.support import chat_fakes as f


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return tmp_path / "home"


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """os.write into files under `state["dir"]` writes half, then fails with ENOSPC."""
    state: dict[str, Any] = {"dir": None, "short": 0}
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        target = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else ""
        if state["dir"] is not None and target.startswith(str(state["dir"])):
            if state["short"] % 2:
                state["short"] += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            state["short"] += 1
            return real_write(fd, bytes(data)[: max(len(data) // 2, 1)])
        return real_write(fd, data)

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file a write goes to")
    monkeypatch.setattr(os, "write", write)
    yield state


# --- 1. a full disk --------------------------------------------------------------------------
def test_a_turn_that_cannot_be_saved_says_so_and_the_chat_goes_on(
        home: Path, full_disk: dict[str, Any], tmp_path: Path) -> None:
    chat, streams = f.session(tmp_path, max_tokens=12)
    chat.chatlog = ChatLog(meta={"model": "fake"})
    full_disk["dir"] = home
    first = chat.ask("hello there")
    _, err = streams.take()
    assert first is not None and chat.conversation.turns == [first]  # kept in memory
    lines = [ln for ln in err.splitlines() if "not saved" in ln]
    assert len(lines) == 1 and "no space left on device" in lines[0] and "/save" in lines[0]
    assert conversation_files() == [] and latest_file() is None  # no empty "latest" file
    second = chat.ask("and again")  # the chat goes on
    assert second is not None and len(chat.conversation.turns) == 2
    copy = tmp_path / "elsewhere" / "kept.jsonl"
    dispatch(chat, f"/save {copy}")  # another disk still keeps everything
    assert [t.user for t in load_conversation(copy).turns] == ["hello there", "and again"]
    full_disk["dir"] = None  # space again: the turns not yet written go with the next one
    chat.ask("third")
    saved = load_conversation(latest_file())  # type: ignore[arg-type]
    assert [t.user for t in saved.turns] == ["hello there", "and again", "third"]


def test_empty_or_recordless_files_are_never_listed_nor_resumed(home: Path) -> None:
    good = ChatLog(meta={"model": "fake"})
    good.append({"type": "turn", "user": "kept", "assistant": "yes"})
    directory = good.path.parent
    (directory / "99990101-000000.jsonl").write_bytes(b"")  # newest name, 0 bytes
    (directory / "99990101-000001.jsonl").write_bytes(b'{"type": "meta", "version": 1')
    os.utime(good.path, (1, 1))  # the good one is the oldest by time, too
    assert conversation_files() == [good.path]
    assert latest_file() == good.path
    assert [s.first for s in conversation_summaries()] == ["kept"]


# --- 2. a torn last line ---------------------------------------------------------------------
def test_append_after_a_torn_line_keeps_the_new_turn_and_reports_the_torn_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.jsonl"
    chatlog = ChatLog(path)
    chatlog.append({"type": "turn", "user": "one", "assistant": "first"})
    with path.open("ab") as handle:
        handle.write(b'{"type": "turn", "user": "two", "assis')  # a crash mid-write
    ChatLog(path).append({"type": "turn", "user": "three", "assistant": "third"})
    capsys.readouterr()
    turns = load_conversation(path).turns
    assert [t.user for t in turns] == ["one", "three"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "line 3" in err


# --- 3. unique names -------------------------------------------------------------------------
def test_two_chats_in_the_same_second_get_two_files(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chatlog_mod.time, "strftime", lambda fmt, *a: "20260101-120000")
    a, b = ChatLog(), ChatLog()
    a.append({"type": "turn", "user": "a", "assistant": "1"})
    b.append({"type": "turn", "user": "b", "assistant": "2"})
    assert a.path != b.path
    assert [t.user for t in load_conversation(a.path).turns] == ["a"]
    assert [t.user for t in load_conversation(b.path).turns] == ["b"]


def test_names_are_unique_across_threads(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chatlog_mod.time, "strftime", lambda fmt, *a: "20260101-120000")
    chatlogs = [ChatLog() for _ in range(8)]
    barrier = threading.Barrier(len(chatlogs))

    def go(i: int) -> None:
        barrier.wait()
        chatlogs[i].append({"type": "turn", "user": f"u{i}", "assistant": "x"})

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(chatlogs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.path for s in chatlogs}) == len(chatlogs)
    assert sorted(load_conversation(s.path).turns[0].user for s in chatlogs) == [
        f"u{i}" for i in range(len(chatlogs))]
    assert all(len(read_records(s.path)) == 2 for s in chatlogs)  # meta + its one turn


# --- 10. private files -----------------------------------------------------------------------
def test_prompt_history_is_private_and_old_files_are_tightened(tmp_path: Path) -> None:
    from specchat.chat import repl

    chat, _ = f.session(tmp_path)
    path = tmp_path / "state" / "history"
    prompt = repl.make_prompt(chat, input_lines=path)
    prompt.history.append_string("my secret question")
    assert "my secret question" in path.read_text()
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    path.chmod(0o644)  # written by an older version
    repl.make_prompt(chat, input_lines=path)
    assert mode(path) == 0o600


def test_verbose_log_is_private(home: Path) -> None:
    from specchat.commands.chat import open_error_log

    log = open_error_log()
    assert log.path is not None and log.logger is not None
    log.record(RuntimeError("the user's words"))
    assert "the user's words" in log.path.read_text()
    assert mode(log.path) == 0o600 and mode(log.path.parent) == 0o700


# --- 11. /save -------------------------------------------------------------------------------
def test_save_is_private_and_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    chat, streams = f.session(tmp_path, max_tokens=8)
    chat.ask("hello")
    mine = tmp_path / "notes.md"
    mine.write_text("the user's own notes")
    with pytest.raises(UsageError, match=r"exists.*/save!"):
        dispatch(chat, f"/save {mine}")
    assert mine.read_text() == "the user's own notes"
    dispatch(chat, f"/save! {mine}")
    assert "## You\n\nhello" in mine.read_text() and mode(mine) == 0o600
    fresh = tmp_path / "new" / "copy.jsonl"
    dispatch(chat, f"/save {fresh}")
    assert mode(fresh) == 0o600 and len(load_conversation(fresh).turns) == 1
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_save_failure_is_one_line(tmp_path: Path) -> None:
    chat, _ = f.session(tmp_path, max_tokens=8)
    chat.ask("hello")
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecchatError, match="cannot"):
        dispatch(chat, f"/save {tmp_path / 'file' / 'under-a-file.jsonl'}")
