"""One place for writing the user's files: atomic, private, checked, never silently overwriting.

Every file specchat writes (conversations, prompt history, calibration, the prompt cache,
settings, `/save` and exports) goes through here, so the rules hold everywhere at once:

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
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from specchat.errors import SpecchatError

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
SHARED_FILE = 0o644
SHARED_DIR = 0o755


class StorageError(SpecchatError):
    """A file could not be written; the message says which and why in one line."""


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
        if private:
            os.chmod(directory, PRIVATE_DIR)  # mkdir's mode is filtered by the umask
    if not path.is_dir():
        raise StorageError(f"cannot use {path} as a directory: it is a file")
    return path


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to fd, or raise OSError (ENOSPC for a short write)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def atomic_write(path: Path, data: bytes | str, *, private: bool = True,
                 overwrite: bool = True) -> Path:
    """Replace (or, with overwrite=False, create) `path` with `data` in one atomic step.

    Raises FileExistsError when overwrite=False and `path` exists, StorageError for any
    other failure; the temporary file never outlives the call.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    make_dirs(path.parent, private=private)
    mode = PRIVATE_FILE if private else SHARED_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            write_all(fd, payload)
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
        raise StorageError(f"cannot write {path}: {describe(exc)}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def append_bytes(path: Path, data: bytes, *, private: bool = True) -> None:
    """Append `data` to `path` (created if missing) so that it starts on a fresh line.

    Either all of `data` is on disk (fsync'd) when this returns, or the file is cut back to
    what it held before and StorageError says why.
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
            raise StorageError(f"cannot write {path}: {describe(exc)}") from None
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
            raise StorageError(f"cannot create a file in {directory}: {describe(exc)}") from None
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
        raise StorageError(f"cannot write {path}: {describe(exc)}") from None


def ensure_private(path: Path) -> None:
    """Tighten an existing file of ours to 0600 (files created by older versions)."""
    try:
        if path.exists() and (path.stat().st_mode & 0o077):
            os.chmod(path, PRIVATE_FILE)
    except OSError:
        pass


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
