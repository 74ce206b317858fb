"""The drafting store on disk (backend/draftstore.py, storefile.py): private, bounded,
safe with several writers at once and after a crash, and forgetful when asked."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specchat.backend import draftstore, storefile
from specchat.backend.draftstore import (
    MAX_SEGMENTS,
    SUFFIX,
    DraftStore,
    forget_everywhere,
    open_store,
    record_start,
    tag_of,
)
from specchat.engine.suffix import KEY_LEN

VOCAB = "v" * 16


def store(root: Path, limit: int = 1 << 26, **kw: object) -> DraftStore:
    return DraftStore(root, VOCAB, limit, **kw)  # type: ignore[arg-type]


def records(s: DraftStore) -> list[list[int]]:
    return [storefile.record_tokens(seg, i).tolist() for seg in s.segments()
            for i in range(len(seg.records))]


def test_records_round_trip_privately(tmp_path: Path) -> None:
    s = store(tmp_path / "drafts")
    s.append([1, 2, 3, 4], tag_of("a"))
    s.append([5, 6, 7], tag_of("b"))
    assert sorted(records(store(tmp_path / "drafts"))) == [[1, 2, 3, 4], [5, 6, 7]]
    for path in [tmp_path / "drafts", tmp_path / "drafts" / VOCAB]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    files = list((tmp_path / "drafts" / VOCAB).iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    index = store(tmp_path / "drafts").index(n_vocab=10)
    found = index.lookup([9, 1, 2], max_occurrences=5, depth=2)
    assert found is not None and found.following.tolist() == [[3, 4]]


def test_a_new_store_opens_by_mapping_files_without_rebuilding_any_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = store(tmp_path)
    for i in range(200):
        s.append(list(range(i, i + 300)), i)
    monkeypatch.setattr(storefile, "build_index", lambda *a: pytest.fail("rebuilt"))
    fresh = store(tmp_path)
    assert len(fresh.segments()) <= MAX_SEGMENTS  # merged as it grew: few files to map
    assert len(records(fresh)) == 200
    assert fresh.index(1000).lookup([5, 6], max_occurrences=4, depth=1) is not None


def test_a_reader_sees_other_writers_appends_at_its_next_answer(tmp_path: Path) -> None:
    reader, writer = store(tmp_path), store(tmp_path)
    writer.append([1, 2, 3], 1)
    assert len(reader.segments()) == 1
    writer.append([4, 5, 6], 2)
    assert sorted(records(reader)) == [[1, 2, 3], [4, 5, 6]]


def test_the_size_limit_evicts_the_oldest_records(tmp_path: Path) -> None:
    limit = 40_000
    s = store(tmp_path, limit=limit)
    for i in range(120):
        s.append([i] * 100, i)
    _, size, _ = s.usage()
    assert size <= limit
    kept = sorted(r[0] for r in records(s))
    assert kept and kept[-1] == 119 and kept[0] > 0  # the newest stay, the oldest went
    assert kept == list(range(kept[0], 120))


def test_forget_removes_exactly_the_tagged_records(tmp_path: Path) -> None:
    s = store(tmp_path)
    for i in range(30):
        s.append([100 + i, 7, 7, 7], tag_of(f"answer {i % 3}"))
    removed = s.forget({tag_of("answer 1")})
    assert removed == 10
    left = records(store(tmp_path))
    assert len(left) == 20 and all((r[0] - 100) % 3 != 1 for r in left)
    raw = b"".join(p.read_bytes() for p in (tmp_path / VOCAB).glob(f"*{SUFFIX}"))
    gone = np.array([101, 7, 7, 7], dtype="<u4").tobytes()
    assert gone not in raw  # not hidden: rewritten without it


def test_forget_everywhere_covers_every_vocabulary(tmp_path: Path) -> None:
    for vocab in ("a" * 16, "b" * 16):
        DraftStore(tmp_path, vocab, 1 << 20).append([1, 2, 3], tag_of("secret"))
    assert forget_everywhere({tag_of("secret")}, tmp_path) == 2
    assert forget_everywhere({tag_of("secret")}, tmp_path / "missing") == 0


def test_torn_files_are_cleaned_and_what_is_not_provably_ours_is_kept(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    folder = tmp_path / VOCAB
    good = next(folder.glob(f"*{SUFFIX}")).read_bytes()
    (folder / f"0-torn{SUFFIX}").write_bytes(good[: len(good) // 2])
    (folder / f"0-garbage{SUFFIX}").write_bytes(os.urandom(500))
    foreign = DraftStore(tmp_path, "f" * 16, 1 << 20)
    foreign.append([9, 9, 9], 2)
    for p in (tmp_path / ("f" * 16)).glob(f"*{SUFFIX}"):
        p.rename(folder / p.name)  # another vocabulary's segment in the wrong place
    stale = folder / f".0-x{SUFFIX}.123.0badcafe.tmp"  # what fileio names a temporary
    stale.write_bytes(b"half a segment")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    assert records(store(tmp_path)) == [[1, 2, 3]]
    store(tmp_path).append([4, 5, 6], 3)  # tidies up while it holds the lock
    names = sorted(p.name for p in folder.iterdir() if p.name != ".lock")
    assert len(names) == 4 and not stale.exists() and not (folder / f"0-torn{SUFFIX}").exists()
    assert f"0-garbage{SUFFIX}" in names  # not ours to delete: skipped, kept
    assert sorted(records(store(tmp_path))) == [[1, 2, 3], [4, 5, 6]]


def _noted(s: DraftStore) -> list[str]:
    said: list[str] = []
    s.warn = said.append
    return said


@pytest.mark.parametrize("garbage", [
    b"SPCHDRF1\x04\x00\x00\x00null",  # a header that is not an object
    b"SPCHDRF1\x08\x00\x00\x00Infinity",
    b"SPCHDRF1\x05\x00\x00\x00[[[[[",
    b"SPCHDRF1" + (3000).to_bytes(4, "little") + b"[" * 3000,  # deeper than json recurses
    b"SPCHDRF1\x0b\x00\x00\x00\xff\xfe not UTF-8",
    b'SPCHDRF1\x0f\x00\x00\x00{"version": 99}',  # another version's
])
def test_a_segment_that_cannot_be_read_is_skipped_named_once_and_kept(
        tmp_path: Path, garbage: bytes) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    bad = tmp_path / VOCAB / f"0{SUFFIX}"
    bad.write_bytes(garbage)
    reader = store(tmp_path)
    said = _noted(reader)
    assert records(reader) == [[1, 2, 3]]
    reader.append([4, 5, 6], 2)  # its tidying reads the file again: no second note
    assert sorted(records(reader)) == [[1, 2, 3], [4, 5, 6]]
    assert len(said) == 1 and f"0{SUFFIX}" in said[0] and "\n" not in said[0]
    assert bad.read_bytes() == garbage


def test_a_header_with_impossible_counts_is_this_stores_and_broken(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    header = json.dumps({"version": storefile.VERSION, "k": KEY_LEN, "vocab": VOCAB,
                         "tokens": 1e300, "keys": 0, "records": 0}).encode()
    bad = tmp_path / VOCAB / f"0{SUFFIX}"
    bad.write_bytes(storefile.MAGIC + struct.pack("<I", len(header)) + header)
    found = storefile.load(bad, KEY_LEN, VOCAB)
    assert found.segment is None and found.broken
    s.append([4, 5, 6], 2)  # the maintainer deletes what is provably its own and broken
    assert not bad.exists() and sorted(records(store(tmp_path))) == [[1, 2, 3], [4, 5, 6]]


def test_a_fifo_or_a_folder_named_like_a_segment_is_never_opened(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    fifo = tmp_path / VOCAB / f"x{SUFFIX}"
    os.mkfifo(fifo)
    (tmp_path / VOCAB / f"y{SUFFIX}").mkdir()
    done: list[list[list[int]]] = []
    reader = store(tmp_path)
    said = _noted(reader)

    def read_and_write() -> None:
        reader.append([4, 5, 6], 2)
        done.append(records(reader))

    worker = threading.Thread(target=read_and_write, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # unblock the reader so the test run can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the store blocked on a FIFO")
    assert sorted(done[0]) == [[1, 2, 3], [4, 5, 6]]
    assert len(said) == 1 and "a FIFO" in said[0] and "2 files" in said[0]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # not ours: kept


def test_a_segment_unreadable_for_a_passing_reason_is_kept(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    first = next((tmp_path / VOCAB).glob(f"*{SUFFIX}"))
    real_open = os.open

    def no_more_files(path: Any, flags: int, *args: Any) -> int:
        if str(path) == str(first):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_open(path, flags, *args)

    monkeypatch.setattr(storefile.os, "open", no_more_files)
    writer = store(tmp_path)
    said = _noted(writer)
    writer.append([4, 5, 6], 2)  # the maintainer cannot read it now: it must not delete it
    monkeypatch.undo()
    assert first.exists() and sorted(records(store(tmp_path))) == [[1, 2, 3], [4, 5, 6]]
    assert len(said) == 1 and "too many open files" in said[0].lower()


def _writer(root: str, worker: int, n: int) -> None:
    s = DraftStore(Path(root), VOCAB, 1 << 26)
    for i in range(n):
        s.append([worker, i, *range(50)], worker * 1000 + i)


def test_several_processes_appending_at_once_lose_and_double_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    seen_while_writing = []
    while any(p.is_alive() for p in procs):
        seen_while_writing.append(len(records(store(tmp_path))))  # readers never lock
    for p in procs:
        p.join()
        assert p.exitcode == 0
    got = sorted((r[0], r[1]) for r in records(store(tmp_path)))
    assert got == sorted((w, i) for w in range(4) for i in range(40))
    assert max(seen_while_writing, default=0) <= 160


KILLED_WRITER = """
import sys
from pathlib import Path
from specchat.backend.draftstore import DraftStore
s = DraftStore(Path(sys.argv[1]), "v" * 16, 1 << 26)
i = 0
while True:
    s.append([7, i // 1000, i % 1000, *range(2000)], i)  # i in two tokens: it can pass 1000
    i += 1
"""


def test_a_writer_killed_mid_write_costs_at_most_that_record(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], env=env)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((tmp_path / VOCAB).glob(f"*{SUFFIX}"))) < 12:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    got = records(store(tmp_path))
    assert got, "nothing was written before the kill"
    assert all(r[3:] == list(range(2000)) for r in got)  # every record whole
    numbers = sorted(r[1] * 1000 + r[2] for r in got)
    assert numbers == list(range(len(numbers)))  # and none lost before the last one
    store(tmp_path).append([1, 2, 3], 1)  # the next writer carries on


def test_record_start_keeps_the_last_message_and_at_most_so_much(tmp_path: Path) -> None:
    def chat(messages: list[dict[str, str]]) -> list[int]:
        return [t for m in messages for t in (1, *map(ord, m["content"]), 2)]

    messages = [{"role": "system", "content": "tools"}, {"role": "user", "content": "hi"}]
    prompt = chat(messages)
    assert prompt[record_start(chat, messages, prompt):] == [1, ord("h"), ord("i"), 2]
    assert record_start(chat, messages[1:], prompt) == 0
    long = list(range(10_000))
    assert record_start(chat, messages[1:], long) == 10_000 - draftstore.MAX_PROMPT


def test_options_open_the_store_they_say(tmp_path: Path) -> None:
    def pieces(t: int) -> bytes:
        return bytes([t % 256])

    def opened(**kw: object) -> DraftStore | None:
        args = {"enabled": True, "size": "64M", "private": False, **kw}
        return open_store(300, frozenset({299}), pieces, root=tmp_path, **args)  # type: ignore[arg-type]

    default = opened()
    assert default is not None and default.writable and default.limit == 64 * 1024**2
    private = opened(private=True)
    assert private is not None and not private.writable
    private.append([1, 2, 3], 1)
    assert not any(tmp_path.iterdir())  # private: nothing written at all
    assert opened(enabled=False) is None and opened(size="0") is None
    other = open_store(301, frozenset({299}), pieces, enabled=True, size="1M", private=False,
                       root=tmp_path)
    assert other is not None and other.vocab != default.vocab


def test_the_key_length_of_files_and_engine_agree(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append([1, 2, 3], 1)
    seg = s.segments()[0]
    assert storefile.read(tmp_path / VOCAB / f"{seg.name}{SUFFIX}", KEY_LEN, VOCAB)
    assert storefile.read(tmp_path / VOCAB / f"{seg.name}{SUFFIX}", KEY_LEN + 1, VOCAB) is None


def test_clear_waits_for_a_merge_and_leaves_nothing_behind(tmp_path: Path) -> None:
    for i in range(3):
        store(tmp_path).append([i, i, i], i)
    merger = store(tmp_path)
    read_them = threading.Event()

    def merge() -> None:  # what _maintain does: read under the lock, write the merged file
        with merger._lock(wait=True):
            segs = merger._read_all()
            read_them.set()
            time.sleep(0.5)  # clear starts meanwhile
            merger._rewrite(segs)

    worker = threading.Thread(target=merge)
    worker.start()
    read_them.wait(10)
    gone = draftstore.clear(tmp_path)
    worker.join()
    assert gone == 3
    assert records(store(tmp_path)) == [] and draftstore.usage_by_vocabulary(tmp_path) == {}
    store(tmp_path).append([7, 7, 7], 7)  # the store works on after a clear
    assert records(store(tmp_path)) == [[7, 7, 7]]


HISTORY_STORE = [sys.executable, "-m", "specchat", "history", "store"]


def test_history_store_names_a_fifo_and_a_garbage_segment_without_hanging(
        tmp_path: Path) -> None:
    root = tmp_path / "drafts"
    store(root).append([1, 2, 3], 1)
    os.mkfifo(root / VOCAB / f"x{SUFFIX}")
    (root / VOCAB / f"0{SUFFIX}").write_bytes(b"SPCHDRF1\x04\x00\x00\x00null")
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"),
           "SPECCHAT_DRAFT_STORE_DIR": str(root),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(HISTORY_STORE, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert "1 answers" in done.stdout
    assert done.stderr.count("\n") == 1 and "skipped 2 files" in done.stderr
    cleared = subprocess.run([*HISTORY_STORE, "--clear", "--yes"], env=env, capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert cleared.returncode == 0 and "deleted 1 answers" in cleared.stderr
    assert cleared.stderr.count("skipped") == 1  # one note per process, not per look
    assert not (root / VOCAB / f"0{SUFFIX}").exists()  # the user asked: regular files go
    assert stat.S_ISFIFO((root / VOCAB / f"x{SUFFIX}").lstat().st_mode)  # never ours


def test_a_link_named_like_a_segment_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    store(elsewhere).append([7, 8, 9], 1)
    target = next((elsewhere / VOCAB).glob(f"*{SUFFIX}"))
    s = store(tmp_path / "drafts")
    s.append([1, 2, 3], 1)
    link = tmp_path / "drafts" / VOCAB / f"x{SUFFIX}"
    link.symlink_to(target)
    found = storefile.load(link, KEY_LEN, VOCAB)
    assert found.segment is None and not found.broken
    assert records(store(tmp_path / "drafts")) == [[1, 2, 3]]
    assert link.is_symlink() and target.exists()  # neither removed
