"""Reads of the user's files: bounded, and never blocked or fooled by what is not a file
(tests/test_bounded_reads.py runs the commands that read them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat import fileread
from specchat.fileio import FileIOError


def test_a_reader_refused_a_fifo_learns_its_kind_and_a_link_is_refused_when_asked(
        tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(fileread.NotRegularFile) as refused:
        fileread.open_regular(fifo)  # returns at once: opened without blocking
    assert refused.value.kind == "a FIFO"
    assert str(refused.value) == f"cannot read {fifo}: is a FIFO, not a regular file"
    real = tmp_path / "real"
    real.write_bytes(b"data")
    link = tmp_path / "link"
    link.symlink_to(real)
    with fileread.open_regular(link) as f:
        assert f.read() == b"data"
    with pytest.raises(FileIOError, match="too many levels of symbolic links"):
        fileread.open_regular(link, follow=False)
