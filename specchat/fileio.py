"""One place for writing the user's files: atomic, private, checked, never silently
overwriting; and the locks that let two processes share them.

Every file specchat writes (conversations, the input history, the drafting store, calibration,
the prompt cache, settings, `/save` and exports) goes through here, so the rules hold
everywhere at once. Model downloads stream into a dot-named partial file and are renamed once
verified (models/hub.py, models/mirror.py); the --verbose log is created here (create_unique)
and then written by `logging`.

- A whole-file write goes to a hidden temporary name in the same directory, is fsync'd, and
  is then renamed over the target: a reader (or a crash) sees the old file or the new one,
  never half of one. `overwrite=False` links instead of renaming, which fails if the name
  exists, so a user's file is never replaced without being asked.
- An append checks every `os.write` for a short write (a full disk returns fewer bytes
  instead of failing); a short append is cut back off the file and reported, so the file
  never gains a torn record. An append always starts on a fresh line, even after a crash
  left the previous line torn.
- Files that hold the user's words are created 0600 and their directories 0700.
- New names are created exclusively (O_EXCL), so two processes never share one file.
- Only regular files are ever replaced: a device, a FIFO or a directory at the path is
  refused, and a symlink (a dotfiles setup) is written through, atomically at its target, so
  the link stays a link. Temporary files left by a killed writer are removed by the next one.
- A lock file is a regular file opened without following a link or blocking on a FIFO, and
  never deleted (a process waiting on a deleted lock would hold a lock nobody else sees).

Reading them, bounded, is fileread.py's; the FileIOError both raise is defined here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from specchat.errors import SpecchatError

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
SHARED_FILE = 0o644
SHARED_DIR = 0o755
STALE_TMP_SECONDS = 3600  # a temporary file this old is a leftover, whoever wrote it


class FileIOError(SpecchatError):
    """A file could not be written (or read); the message says which and why in one line,
    `reason` only why (for callers that name the file their own way)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def describe(exc: OSError) -> str:
    """A short reason for an OSError ('no space left on device', 'permission denied')."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text else text


def make_dirs(path: Path, *, private: bool = True) -> Path:
    """Create `path` and missing parents; the ones created here get 0700 when private.

    Existing directories keep their mode: a user's own choice for ~/.config is not ours.
    """
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR if private else SHARED_DIR)
        except FileExistsError:
            continue  # another process made it between our check and mkdir
        except OSError as exc:  # a read-only file system, a parent we may not write in
            raise FileIOError(f"cannot create {directory}: {describe(exc)}") from None
        if private:
            os.chmod(directory, PRIVATE_DIR)  # mkdir's mode is filtered by the umask
    if not path.is_dir():
        raise FileIOError(f"cannot use {path} as a directory: it is a file")
    return path


# Bytes in any form a write takes without copying them first (a model's state is hundreds of MB).
Buffer = bytes | bytearray | memoryview


def write_all(fd: int, data: Buffer) -> None:
    """Write every byte of `data` to fd, or raise OSError (ENOSPC for a short write)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def atomic_write(path: Path, data: Buffer | str | list[Buffer], *, private: bool = True,
                 overwrite: bool = True) -> Path:
    """Replace (or, with overwrite=False, create) `path` with `data` (a list: its parts one
    after another, never joined in memory) in one atomic step.

    Raises FileExistsError when overwrite=False and `path` exists, FileIOError for any
    other failure; the temporary file never outlives the call.
    """
    path = write_target(Path(path))
    parts = data if isinstance(data, list) else \
        [data.encode("utf-8") if isinstance(data, str) else data]
    make_dirs(path.parent, private=private)
    remove_stale_temps(path)
    mode = PRIVATE_FILE if private else SHARED_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            for part in parts:
                write_all(fd, part)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails with FileExistsError instead of replacing
        fsync_dir(path.parent)
    except FileExistsError:
        raise
    except OSError as exc:
        raise FileIOError(f"cannot write {path}: {describe(exc)}") from None
    finally:
        _remove_quietly(tmp)
    return path


def _remove_quietly(path: Path) -> None:
    """Remove our temporary file if it is there; a read-only file system refuses even the
    removal of a name it does not hold (EROFS, not ENOENT), which must not hide the real
    error with a temporary file's name."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def write_target(path: Path) -> Path:
    """Where a write to `path` lands: the file a symlink points to (followed to its end, so a
    dotfiles link stays a link and its target gets the new content), refused with
    FileIOError unless it is a regular file or a new name."""
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise FileIOError(f"cannot write {path}: {describe(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileIOError(f"cannot write {path}: it is {file_kind(st.st_mode)}, not a regular "
                           "file (specchat replaces only regular files)")
    return path


def file_kind(mode: int) -> str:
    """'a directory', 'a character device', 'a FIFO'... for one-line refusals."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return kind
    return "not a file"


def remove_stale_temps(path: Path) -> None:
    """Remove `.NAME.PID.HEX.tmp` files that a killed writer of `path` left behind: those of
    processes that are gone, and any older than STALE_TMP_SECONDS."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)\.[0-9a-f]+\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    now = time.time()
    for name in names:
        found = pattern.fullmatch(name)
        if found is None:
            continue
        leftover = path.parent / name
        try:
            old = now - leftover.lstat().st_mtime > STALE_TMP_SECONDS
            if old or not _alive(int(found.group(1))):
                leftover.unlink()
        except OSError:
            continue  # gone already, or not ours to remove


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this process may be writing it right now (another thread)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def append_bytes(path: Path, data: bytes, *, private: bool = True) -> None:
    """Append `data` to `path` (created if missing) so that it starts on a fresh line.

    Either all of `data` is on disk (fsync'd) when this returns, or the file is cut back to
    what it held before and FileIOError says why.
    """
    path = Path(path)
    fd = _open_append(path, private)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # the last line was torn by a crash: leave it on its own line
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:
            _cut_back(fd, size)
            raise FileIOError(f"cannot write {path}: {describe(exc)}") from None
    finally:
        os.close(fd)


def _cut_back(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the reader skips a torn last line anyway


def create_unique(directory: Path, stem: str, suffix: str, *, private: bool = True) -> Path:
    """Create and return a new empty file `stem[-N]suffix` in `directory`, exclusively.

    Two processes asking in the same second get two different files, whatever the timing.
    """
    directory = make_dirs(Path(directory), private=private)
    n = 1
    while True:
        name = f"{stem}{suffix}" if n == 1 else f"{stem}-{n}{suffix}"
        path = directory / name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         PRIVATE_FILE if private else SHARED_FILE)
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            raise FileIOError(f"cannot create a file in {directory}: {describe(exc)}") from None
        os.close(fd)
        fsync_dir(directory)
        return path


def ensure_file(path: Path, *, private: bool = True) -> Path:
    """Make sure `path` exists (created empty, 0600 when private) for a library that appends
    to it by itself (prompt-toolkit's history, logging), and tighten one an older version
    created; its directories are created 0700."""
    path = Path(path)
    os.close(_open_append(path, private))
    if private:
        ensure_private(path)
    return path


def _open_append(path: Path, private: bool) -> int:
    """An fd appending to `path`, created (private or not) with its directories if missing."""
    make_dirs(path.parent, private=private)
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT,
                       PRIVATE_FILE if private else SHARED_FILE)
    except OSError as exc:
        raise FileIOError(f"cannot write {path}: {describe(exc)}") from None


def ensure_private(path: Path) -> None:
    """Tighten an existing file of ours to 0600 (files created by older versions)."""
    try:
        if path.exists() and (path.stat().st_mode & 0o077):
            os.chmod(path, PRIVATE_FILE)
    except OSError:
        pass


@contextlib.contextmanager
def locked(path: Path, *, wait: bool, private: bool = True) -> Iterator[bool]:
    """An exclusive lock on `path` (created if missing) for the `with` block: True when held,
    False when another process holds it and `wait` is False. FileIOError when `path` cannot
    be a lock file (a FIFO, a directory, a link, a read-only place)."""
    path = Path(path)
    make_dirs(path.parent, private=private)
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, PRIVATE_FILE if private else SHARED_FILE)
    except OSError as exc:
        raise FileIOError(f"cannot lock {path}: {describe(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileIOError(f"cannot lock {path}: it is {file_kind(mode)}, not a regular "
                               "file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def locked_directory(path: Path, *, private: bool = True) -> Iterator[None]:
    """An exclusive lock on the directory `path` (created if missing) for the `with` block,
    waiting for it: for a read-change-write of a file in it that is replaced by rename (a lock
    on the file itself would stay with the old inode), without a lock file left beside it.
    FileIOError when `path` cannot be a directory."""
    make_dirs(path, private=private)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise FileIOError(f"cannot lock {path}: {describe(exc)}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock

def fsync_dir(path: Path) -> None:
    """Make a new or renamed name in `path` survive a crash (where the filesystem allows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the data itself is synced
    finally:
        os.close(fd)
