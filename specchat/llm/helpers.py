"""Pure pieces of the llama.cpp backend: row bookkeeping, batch planning, file checks.

Split out of the backend package so they can be tested without llama.cpp and so it holds
only what must touch the C API.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specchat.errors import ModelError

GGUF_MAGIC = b"GGUF"

# enum llama_vocab_type, by value.
VOCAB_TYPES = {0: "none", 1: "spm", 2: "bpe", 3: "wpm", 4: "ugm", 5: "rwkv", 6: "plamo2"}


class LogSink:
    """Where llama.cpp's C log lines go (installed with llama_log_set by the backend).

    Keeps the last error lines for one-line error messages and prints only when verbose.
    """

    ERROR, CONT = 4, 5  # enum ggml_log_level (ggml.h)

    def __init__(self) -> None:
        self.verbose = False
        self.errors: deque[str] = deque(maxlen=16)
        self.interrupted = False
        self._level = 0

    def __call__(self, level: int, text: bytes | None, _user_data: object) -> None:
        try:
            message = (text or b"").decode("utf-8", errors="replace")
            self._level = level = self._level if level == self.CONT else level
            if level == self.ERROR:
                self.errors.append(message)
            if self.verbose:
                sys.stderr.write(message)
        except KeyboardInterrupt:
            # Ctrl-C while C code calls back into Python: ctypes would print and swallow it.
            # Keep it until the C call returns (raise_pending_interrupt).
            self.interrupted = True

    def raise_pending_interrupt(self) -> None:
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt


class AbortFlag:
    """llama.cpp's abort callback, answering True once Ctrl-C arrived during a long batch.

    Python runs a SIGINT handler only when the main thread executes bytecode, which during
    llama_decode happens in this callback (llama.cpp calls it between graph nodes on the
    calling thread). A raising handler would raise inside the callback, where ctypes swallows
    it; so `armed()` swaps in a handler that only sets the flag, and the backend raises
    KeyboardInterrupt itself once the C call has returned.
    """

    def __init__(self) -> None:
        self.interrupted = False

    def __call__(self, _user_data: object) -> bool:
        return self.interrupted

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        self.interrupted = True

    @contextmanager
    def armed(self) -> Iterator[bool]:
        """Catch SIGINT into the flag for the duration; yields False where it cannot (not
        the main thread, or someone else's SIGINT handler is installed)."""
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            yield False
            return
        self.interrupted = False
        signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield True
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def raise_pending_interrupt(self) -> None:
        if self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt


def normalize_rows(logit_rows: Sequence[int], n: int) -> list[int]:
    """Row indices into a batch of n tokens, negatives counted from the end."""
    rows = [int(r) + n if r < 0 else int(r) for r in logit_rows]
    bad = [r for r, norm in zip(logit_rows, rows) if not 0 <= norm < n]
    if bad:
        raise IndexError(f"logit rows {bad} outside a batch of {n} tokens")
    return rows


def chunk_spans(n: int, size: int) -> list[tuple[int, int]]:
    """[lo, hi) spans of at most `size` covering range(n), in order."""
    if size <= 0:
        raise ValueError("batch size must be positive")
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def rows_in_span(rows: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """(output index, index inside the chunk) for every requested row that falls in [lo, hi)."""
    return [(k, r - lo) for k, r in enumerate(rows) if lo <= r < hi]


def default_threads() -> int:
    """The CPUs this process may run on (cgroup / affinity aware where the OS says so)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def check_gguf_file(path: Path) -> Path:
    """`path` if it is a readable GGUF file, else a one-line ModelError that says what to do."""
    if not path.exists():
        raise ModelError(f"model file not found: {path} does not exist; give a path to a "
                         f".gguf file or a preset name (see `specchat models`)")
    if not path.is_file():
        raise ModelError(f"{path} is a folder, not a model file; give a path to a .gguf file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path} is not a GGUF model file (it does not start with 'GGUF'); "
                         f"convert it with llama.cpp or pick a .gguf file")
    return path


def token_or_none(token: int) -> int | None:
    """llama.cpp says 'no such token' with -1 (LLAMA_TOKEN_NULL)."""
    return None if token < 0 else int(token)


def log_reason(lines: Sequence[str]) -> str:
    """The root cause among llama.cpp's warnings and errors after a failure, as one line.

    llama.cpp reports a failure bottom-up (the cause first, then each caller's "failed"), so
    the first line says most; its `function_name: ` prefix means nothing to a user.
    """
    for line in lines:
        text = " ".join(line.split())
        if text:
            return re.sub(r"^[A-Za-z_]\w*: ", "", text)
    return "no details (rerun with --verbose)"


# llama.cpp's text getters write into a caller's buffer. Two conventions: "returns -needed when
# the buffer is too small" (tokenize, token_to_piece, detokenize) and snprintf's "returns the
# full length, truncated to the buffer" (metadata getters).
def read_negative_size(fill: Callable[[Any, int], int], size: int) -> bytes:
    """Bytes from fill(buf, size), retried once with the size fill says it needs."""
    while True:
        buf = ctypes.create_string_buffer(max(size, 1))
        n = fill(buf, max(size, 1))
        if n >= 0:
            return buf.raw[:n]
        size = -n


def read_snprintf(fill: Callable[[Any, int], int], size: int = 256) -> bytes:
    """Bytes from an snprintf-style fill(buf, size); empty when it reports failure (-1)."""
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fill(buf, size)
        if n < 0:
            return b""
        if n < size:
            return buf.raw[:n]
        size = n + 1


def read_tokens(fill: Callable[[Any, int], int], size: int) -> list[int]:
    """Token ids (int32) from fill(array, size), with the same -needed convention."""
    while True:
        arr = (ctypes.c_int32 * max(size, 1))()
        n = fill(arr, max(size, 1))
        if n >= 0:
            return list(arr[:n])
        size = -n


_GGML_SIGNATURES = {  # name: (restype, argtypes), the backend registry API of ggml-backend.h
    "ggml_backend_reg_count": (ctypes.c_size_t, []),
    "ggml_backend_reg_get": (ctypes.c_void_p, [ctypes.c_size_t]),
    "ggml_backend_reg_name": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ggml_backend_dev_count": (ctypes.c_size_t, []),
    "ggml_backend_dev_get": (ctypes.c_void_p, [ctypes.c_size_t]),
    "ggml_backend_dev_description": (ctypes.c_char_p, [ctypes.c_void_p]),
    "ggml_backend_dev_backend_reg": (ctypes.c_void_p, [ctypes.c_void_p]),
    "ggml_backend_dev_memory": (None, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                       ctypes.POINTER(ctypes.c_size_t)]),
}
# Registries whose devices do not hold offloaded layers.
HOST_BACKENDS = frozenset({"CPU", "BLAS", "RPC"})


def ggml_registry(lib: ctypes.CDLL) -> tuple[list[str], list[str]]:
    """Backend names (CPU, CUDA, Metal, ...) and device descriptions from a loaded libggml.

    Both empty for an older ggml without the registry API.
    """
    if not _declare(lib):
        return [], []
    names = [(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)) or b"?").decode()
             for i in range(lib.ggml_backend_reg_count())]
    devices = [(lib.ggml_backend_dev_description(lib.ggml_backend_dev_get(i)) or b"?").decode()
               for i in range(lib.ggml_backend_dev_count())]
    return names, devices


def ggml_gpu_memory(lib: ctypes.CDLL) -> list[tuple[str, int, int]]:
    """(description, free bytes, total bytes) of every device that can hold offloaded layers,
    as its ggml backend reports it; empty on a CPU-only build or an older ggml."""
    if not _declare(lib):
        return []
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        reg = (lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)) or b"").decode()
        if reg in HOST_BACKENDS:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (lib.ggml_backend_dev_description(dev) or b"?").decode()
        found.append((name, int(free.value), int(total.value)))
    return found


def _declare(lib: ctypes.CDLL) -> bool:
    try:
        for name, (restype, argtypes) in _GGML_SIGNATURES.items():
            getattr(lib, name).restype = restype
            getattr(lib, name).argtypes = argtypes
    except AttributeError:
        return False
    return True


_SPLIT_PART = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


def gguf_parts(path: Path) -> list[Path]:
    """Every file of a split GGUF (llama.cpp loads the rest from the first), else [path]."""
    match = _SPLIT_PART.match(path.name)
    if match is None:
        return [path]
    total = int(match["total"])
    return [path.with_name(f"{match['stem']}-{i:05d}-of-{total:05d}.gguf")
            for i in range(1, total + 1)]
