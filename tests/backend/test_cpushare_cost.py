"""Counting the specchat processes that decode is cheap enough to ask every few steps: it
tries only the slot files that exist, not every slot a machine could use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specchat.backend import cpushare
from specchat.backend.cpushare import SLOTS, CpuShare


def test_counting_opens_only_the_slot_files_that_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other, here = CpuShare(tmp_path, cores=2), CpuShare(tmp_path, cores=2)
    other.acquire()  # slot 0 exists and is held; the other SLOTS - 1 were never created
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(cpushare.os, "open", counting_open)
    try:
        assert here.active() == 1 and here.threads(2) == 1
    finally:
        other.release()
    assert len(opened) == 2 < SLOTS  # slot 0, once per count
    assert all(p.endswith("slot-0.lock") for p in opened)


def test_a_stray_file_in_the_directory_is_not_a_process(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "slot-99.lock").write_text("")  # beyond SLOTS: never one of ours
    share = CpuShare(tmp_path, cores=2)
    assert share.active() == 0
    share.acquire()
    try:
        assert share.active() == 1 and CpuShare(tmp_path, cores=2).active() == 1
    finally:
        share.release()
