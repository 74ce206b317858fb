"""The calibration file: measured cost tables and learnt state, keyed by model file, settings
and machine, and what each entry records of where it came from.

One JSON file, best-effort both ways (CalibrationCache). A key names the model file as it is
(path, size, time), the settings, and the machine (host, CPU, cores): the same key, the same
costs. An entry also records its model file and settings (`origin`), so that `doctor` can tell
the entries in force here from those of another CPU, an older file or other settings.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.engine.cost import CostTable
from specchat.fileio import FileIOError

# /proc/cpuinfo lines that say which CPU this is and which instructions it offers (llama.cpp
# chooses its kernels by them); "cpu MHz" and the like change by the second and are left out.
CPU_FIELDS = frozenset({"vendor_id", "cpu family", "model", "model name", "stepping", "flags",
                        "CPU implementer", "CPU architecture", "CPU variant", "CPU part",
                        "Features"})


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first processor's identity in `cpuinfo`, else platform.processor(). That is empty
    on Linux, where a virtual machine can move to another CPU under the same host name."""
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as f:
            lines = list(itertools.takewhile(str.strip, itertools.islice(f, 200)))
    except OSError:
        return platform.processor()
    fields = [line.strip() for line in lines if line.split(":", 1)[0].strip() in CPU_FIELDS]
    return "\n".join(fields) or platform.processor()


@functools.cache
def _this_cpu() -> str:
    return cpu_identity()


def machine_key(model_path: Path, settings: dict[str, object]) -> str:
    """Same file, same settings, same machine (host, CPU, cores): the same costs."""
    st = model_path.stat() if model_path.exists() else None
    parts = [str(model_path.resolve()), str(st.st_size if st else 0),
             str(int(st.st_mtime) if st else 0), platform.node(), platform.machine(),
             _this_cpu(), str(os.cpu_count()), json.dumps(settings, sort_keys=True)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


class CalibrationCache:
    """A JSON file of measured cost tables keyed by machine_key; corrupt files are ignored.

    Best-effort both ways: a file that cannot be read is measured again, and one that cannot
    be written (read-only cache, a directory in its place) costs one warning, never the run.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warned = False

    def read(self) -> dict[str, Any]:
        """The whole file as a dict; {} for a missing, unreadable or corrupt one (bounded:
        a device or a FIFO in its place is not read)."""
        try:
            data = json.loads(fileread.read_limited(self.path, fileread.SETTINGS_LIMIT))
        except (OSError, FileIOError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def load(self, key: str) -> CostTable | None:
        return table_of(self.load_entry(key))

    def save(self, key: str, table: CostTable, label: str,
             where: dict[str, object] | None = None) -> None:
        """A table for key (what it measured so far is kept beside it); `where`: its origin."""
        def merged(old: object | None) -> object:
            return {**(old if isinstance(old, dict) else {}), **(where or {}),
                    "seconds": table.seconds, "model": label, "when": time.time()}

        self.update(key, merged)

    def load_entry(self, key: str) -> object | None:
        """Any JSON value stored under key (the caller validates it), or None."""
        return self.read().get(key)

    def save_entry(self, key: str, value: object) -> None:
        self.update(key, lambda _: value)

    def update(self, key: str, change: Callable[[object | None], object]) -> None:
        """Store change(what key holds now) under key; nothing is written when it returns
        what it was given. Read, changed and written with the directory locked: a chat and a
        script saving at once would otherwise each write the file without the other's
        entry."""
        try:
            with fileio.locked_directory(self.path.parent, private=False):
                data = self.read()
                old = data.get(key)
                new = change(old)
                if new is old:
                    return
                data[key] = new
                fileio.atomic_write(self.path, json.dumps(data, indent=1), private=False)
        except (FileIOError, OSError) as exc:
            if not self.warned:
                self.warned = True
                print(f"specchat: warning: calibration not cached ({exc}); it is measured "
                      "again next time", file=sys.stderr)


def table_of(entry: object) -> CostTable | None:
    """The table a cache entry holds ({"seconds": [...]}); None for anything else."""
    seconds = entry.get("seconds") if isinstance(entry, dict) else None
    if isinstance(seconds, list) and seconds and all(
            isinstance(s, (int, float)) and s > 0 for s in seconds):
        return CostTable([float(s) for s in seconds])
    return None


def origin(path: Path, knobs: dict[str, object], sizes: tuple[int, ...]) -> dict[str, object]:
    """What an entry records of where its table came from, so that `doctor` can tell the
    entries in force here from those of another CPU, an older model file or other settings."""
    return {"path": str(path.resolve()), "knobs": knobs, "sizes": list(sizes)}


def measured_here(key: str, entry: object,
                  guesses: Iterable[tuple[Path, dict[str, object]]] = ()
                  ) -> dict[str, object] | None:
    """The settings an entry's table was measured under when `key` is this machine's key for
    its model file as the file is now; None for another machine's, an older file's, or one
    whose origin is unknown. An entry written before origins were recorded is matched
    against `guesses` (model file, settings). Only stats the named file, never opens it."""
    if not isinstance(entry, dict):
        return None
    path, knobs = entry.get("path"), entry.get("knobs")
    if isinstance(path, str) and isinstance(knobs, dict):
        guesses = [(Path(path), knobs)]
    for file, tried in guesses:
        try:
            if machine_key(file, tried) == key:
                return tried
        except (OSError, TypeError, ValueError):  # an unreadable path, settings not JSON
            continue
    return None
