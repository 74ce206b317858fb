"""Reading text and token ids out of llama.cpp's C getters, and one-line reasons from its log.

Pure ctypes helpers (no llama_cpp import), testable with plain Python callables.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Sequence
from typing import Any


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
