"""Specchat processes decoding at once split the cores instead of fighting over them."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specchat.backend.cpushare import CpuShare
from specchat.backend.local import Runtime
from specchat.backend.threads import SHARE_EVERY, SHARE_SECONDS, ThreadGovernor


def test_each_decoding_process_is_counted_and_the_cores_are_split(tmp_path: Path) -> None:
    # flock locks belong to open files, so two instances in one process behave like two
    # processes (a real second process is below).
    a, b = CpuShare(tmp_path, cores=2), CpuShare(tmp_path, cores=2)
    assert b.active() == 0 and b.threads(2) == 2  # nobody decoding
    a.acquire()
    assert b.active() == 1
    b.acquire()
    assert a.active() == b.active() == 2
    assert a.threads(2) == b.threads(2) == 1
    a.release()
    assert b.active() == 1 and b.threads(2) == 2  # the other one finished: all cores again
    b.release()
    assert a.active() == 0


def test_slot_files_are_private(tmp_path: Path) -> None:
    share = CpuShare(tmp_path / "cpu", cores=2)
    share.acquire()
    try:
        assert stat.S_IMODE((tmp_path / "cpu").stat().st_mode) == 0o700
        for f in (tmp_path / "cpu").iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600
    finally:
        share.release()


def test_a_killed_process_stops_counting_at_once(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; "
            "from specchat.backend.cpushare import CpuShare;"
            "s = CpuShare(Path(sys.argv[1]), cores=2); s.acquire(); print('held', flush=True);"
            "time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        here = CpuShare(tmp_path, cores=2)
        assert here.active() == 1 and here.threads(2) == 1
        child.send_signal(signal.SIGKILL)
        child.wait()
        for _ in range(100):  # the kernel drops the lock as the process goes
            if here.active() == 0:
                break
            time.sleep(0.05)
        assert here.active() == 0 and here.threads(2) == 2
    finally:
        child.kill()
        child.wait()


def test_an_unusable_directory_means_no_sharing_not_a_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    share = CpuShare(blocker / "cpu", cores=2)
    share.acquire()
    assert share.broken and share.threads(2) == 2
    share.release()


def test_the_governor_follows_the_share_within_a_few_steps() -> None:
    calls: list[int] = []
    others = [0]
    g = ThreadGovernor(2, [calls.append], 0.03, share=lambda: 2 // (1 + others[0]))
    for _ in range(3 * SHARE_EVERY):
        g.observe(0.03, 1.0)
    assert calls == []
    others[0] = 1  # another specchat process started decoding
    for _ in range(SHARE_EVERY):
        g.observe(0.06, 1.0)
    assert calls == [1] and g.threads == 1
    others[0] = 0
    for _ in range(SHARE_EVERY):
        g.observe(0.06, 1.0)
    assert calls == [1, 2] and g.threads == 2


def test_fast_steps_look_at_the_share_once_per_stretch_of_decoding_not_every_few_steps(
        ) -> None:
    looks: list[int] = []

    def share() -> int:
        looks.append(1)
        return 2

    g = ThreadGovernor(2, [], 0.005, share=share)
    steps = 0
    while not looks:  # GPU-fast steps
        g.observe(0.005, 1.0)
        steps += 1
    assert steps >= round(SHARE_SECONDS / 0.005) - 1 > 2 * SHARE_EVERY
    for _ in range(SHARE_EVERY - 1):  # slow steps: still no more often than SHARE_EVERY
        g.observe(1.0, 1.0)
    assert len(looks) == 1
    g.observe(1.0, 1.0)
    assert len(looks) == 2


def test_an_answer_holds_a_slot_from_its_first_event_to_its_end(tmp_path: Path) -> None:
    calls: list[int] = []
    governor = ThreadGovernor(2, [calls.append], 0.03)
    mine, other = CpuShare(tmp_path, cores=2), CpuShare(tmp_path, cores=2)
    other.acquire()  # someone else is decoding already

    def events():  # stands in for the engine's event stream
        yield 1
        assert mine.active() == 2
        yield 2

    stream = Runtime._sharing_cores(events(), governor, mine)  # type: ignore[arg-type]
    assert mine.active() == 1  # only the other: nothing happens before the first event
    assert next(stream) == 1
    assert calls == [1]  # its share from the start: one core of two
    assert list(stream) == [2]
    assert other.active() == 1  # released when the answer ended
    other.release()


def test_a_slot_that_is_a_fifo_does_not_block_counting(tmp_path: Path) -> None:
    """Counting opens every slot file for reading: a FIFO there (nobody writing) would
    otherwise hold up every answer's start."""
    import threading

    os.mkfifo(tmp_path / "slot-0.lock")
    share = CpuShare(tmp_path, cores=2)
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(share.active()), daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        os.close(os.open(tmp_path / "slot-0.lock", os.O_WRONLY | os.O_NONBLOCK))
        raise AssertionError("counting the slots blocked on a FIFO")
    assert got == [0]


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_link_or_a_fifo_under_a_slots_name_is_passed_over_not_locked(
        tmp_path: Path, kind: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    share_dir = tmp_path / "cpu"
    share_dir.mkdir()
    if kind == "link":
        (share_dir / "slot-0.lock").symlink_to(elsewhere)
    else:
        os.mkfifo(share_dir / "slot-0.lock")
    share, other = CpuShare(share_dir, cores=2), CpuShare(share_dir, cores=2)
    share.acquire()
    try:
        assert not share.broken and not elsewhere.exists()  # nothing created through a link
        assert (share_dir / "slot-1.lock").is_file()  # the next slot is the one taken
        assert other.active() == 1
    finally:
        share.release()
    assert other.active() == 0
