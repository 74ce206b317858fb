"""The one module that writes the user's files: atomic, private, checked, exclusive."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from specchat import fileio
from specchat.fileio import FileIOError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_is_private_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "file.txt"
    fileio.atomic_write(target, "hello")
    assert target.read_text() == "hello"
    assert mode(target) == 0o600
    assert mode(target.parent) == 0o700 and mode(target.parent.parent) == 0o700
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]



def test_atomic_write_of_parts_writes_them_one_after_another(tmp_path: Path) -> None:
    target = tmp_path / "state.bin"
    big = bytearray(b"x" * 3_000_000)
    fileio.atomic_write(target, [b"head", memoryview(big)[1:], bytearray(b"tail")])
    assert target.read_bytes() == b"head" + bytes(big[1:]) + b"tail"
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]

def test_atomic_write_without_overwrite_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "mine.txt"
    target.write_text("the user's words")
    with pytest.raises(FileExistsError):
        fileio.atomic_write(target, "ours", overwrite=False)
    assert target.read_text() == "the user's words"
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_atomic_write_failure_is_one_error_and_no_temp(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(FileIOError, match="cannot write"):
        fileio.atomic_write(tmp_path / "dir.json", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["dir.json"]


def test_append_starts_on_a_fresh_line_after_a_torn_one(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"a": 1}\n{"torn": ')
    fileio.append_bytes(log, b'{"b": 2}\n')
    assert log.read_bytes().splitlines() == [b'{"a": 1}', b'{"torn": ', b'{"b": 2}']


def test_short_write_is_reported_and_cut_back(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log.jsonl"
    fileio.append_bytes(log, b"first\n")
    real_write = os.write

    def short(fd: int, data: bytes) -> int:  # a full disk: fewer bytes, then none
        return real_write(fd, bytes(data[:3])) if len(data) > 3 else 0

    monkeypatch.setattr(fileio.os, "write", short)
    with pytest.raises(FileIOError, match="no space left on device"):
        fileio.append_bytes(log, b"second line\n")
    monkeypatch.undo()
    assert log.read_bytes() == b"first\n"


def test_create_unique_never_shares_a_name(tmp_path: Path) -> None:
    made: list[Path] = []
    lock = threading.Lock()

    def make() -> None:
        path = fileio.create_unique(tmp_path, "20260101-000000", ".jsonl")
        with lock:
            made.append(path)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({p.name for p in made}) == 16
    assert all(mode(p) == 0o600 for p in made)


def test_ensure_private_tightens_old_files(tmp_path: Path) -> None:
    old = tmp_path / "history"
    old.write_text("x")
    os.chmod(old, 0o644)
    fileio.ensure_private(old)
    assert mode(old) == 0o600
