"""Bounded reads of the user's files.

Reads of the user's files are bounded: `read_limited` refuses devices (and FIFOs, unless asked
to take pipes) and stops at a size limit, so /dev/zero or a FIFO nobody writes to can neither
fill the memory nor hang a command; `read_head` and `open_regular` serve a reader that takes
only part of a file (a model's magic or hash, a prompt-cache entry, a mapped store segment,
another process's lock), refusing what `read_limited` refuses (NotRegularFile says what it is
instead); `read_stream` holds stdin to a limit. Every refusal is a FileIOError of one line.
"""

from __future__ import annotations

import fcntl
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

from specchat.fileio import FileIOError, describe, file_kind

READ_CHUNK = 1 << 20
SETTINGS_LIMIT = 4 << 20  # config.toml, models.toml, calibration: far beyond any real one


class NotRegularFile(FileIOError):
    """A read refused because the path is a FIFO, a device, a directory... (`kind`: 'a FIFO'),
    for a reader that words the refusal its own way."""

    def __init__(self, path: Path, kind: str) -> None:
        reason = f"is {kind}, not a regular file"
        super().__init__(f"cannot read {path}: {reason}", reason)
        self.kind = kind


def read_limited(path: Path, limit: int, *, pipes: bool = False) -> bytes:
    """The bytes of a user's file, at most `limit` of them, else FileIOError (one line).

    Only regular files are read, and FIFOs or pipes when `pipes` (`-f <(git diff)`): a device
    (/dev/zero behind a symlink) is refused before reading, so is a FIFO when not wanted
    (opened without blocking, so one that nobody writes to cannot hang us), and a file that
    grows past the limit while read is refused at the limit. FileNotFoundError passes
    through: a missing file often means "none yet".
    """
    fd = _open_readable(path, pipes)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):  # a pipe's writer may be slow: wait for it
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return _read_bounded(fd, path, limit)
    except OSError as exc:
        raise _unreadable(path, describe(exc)) from None
    finally:
        os.close(fd)


def read_head(path: Path, count: int) -> bytes:
    """The first `count` bytes (fewer if the file is shorter) of a user's regular file that
    may be far larger (a model), else FileIOError (one line): a FIFO or a device is refused
    as `read_limited` refuses it, before any read. FileNotFoundError passes through."""
    fd = _open_readable(path, pipes=False)
    try:
        return os.pread(fd, count, 0)
    except OSError as exc:
        raise _unreadable(path, describe(exc)) from None
    finally:
        os.close(fd)


def open_regular(path: Path, *, follow: bool = True) -> io.BufferedReader:
    """A user's regular file opened for reading in binary, for a reader that takes only what
    it needs of a large file (a model's head or hash, a mapped segment); a FIFO or a device is
    refused as `read_limited` refuses it (NotRegularFile), and so is a symlink unless
    `follow`; FileNotFoundError passes through."""
    return os.fdopen(_open_readable(path, pipes=False, follow=follow), "rb")


def _open_readable(path: Path, pipes: bool, follow: bool = True) -> int:
    """A read-only fd on a regular file at `path` (or a FIFO, when `pipes`), opened without
    blocking so that a FIFO nobody writes to cannot hang the open."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _unreadable(path, describe(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _unreadable(path, describe(exc)) from None
    if not (stat.S_ISREG(mode) or (pipes and stat.S_ISFIFO(mode))):
        os.close(fd)
        raise NotRegularFile(path, file_kind(mode))
    return fd


def read_text(path: Path, limit: int) -> str:
    """A user's UTF-8 text file, read as `read_limited` reads (no FIFO, no device, at most
    `limit` bytes); FileIOError when it is not UTF-8 text either."""
    data = read_limited(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None


def read_stream(stream: BinaryIO, limit: int, name: str) -> bytes:
    """An open stream read to its end (stdin: a file, a pipe or /dev/zero), at most `limit`
    bytes of it, else FileIOError: what comes without a path is held to a limit too."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise FileIOError(f"{name} is too large (more than {_size_text(limit)})",
                          f"is too large (more than {_size_text(limit)})")
    return data


def _size_text(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


def _read_bounded(fd: int, path: Path, limit: int) -> bytes:
    size = _size_text(limit)
    if os.fstat(fd).st_size > limit:
        raise _unreadable(path, f"is too large (more than {size})")
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(READ_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _unreadable(path, f"is too large (more than {size})")


def _unreadable(path: Path, reason: str) -> FileIOError:
    return FileIOError(f"cannot read {path}: {reason}", reason)
