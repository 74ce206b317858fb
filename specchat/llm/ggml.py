"""What the ggml library runs on: its compiled-in backends, their devices and free memory, and
the CPU threads a process may use. The registry is read through ctypes from a loaded libggml
that the caller passes in, so this module imports no llama_cpp itself.
"""

from __future__ import annotations

import ctypes
import os


def default_threads() -> int:
    """The CPUs this process may run on (cgroup / affinity aware where the OS says so)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no sched_getaffinity
        return max(1, os.cpu_count() or 1)


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
