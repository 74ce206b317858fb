"""GGUF files and the machine without loading weights: model shape, vocabulary, GPU
devices, requantizing, system info, and llama-cpp-python's own `Llama` for benchmarks.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp

from specchat.errors import ModelError, UsageError
from specchat.llm.cbuf import log_reason
from specchat.llm.ggml import default_threads, ggml_gpu_memory, ggml_registry
from specchat.llm.gguf import GgufSummary, check_gguf_file, gguf_parts
from specchat.llm.gpufit import Device, ModelShape, shape_from_metadata
from specchat.llm.lib import (
    LOG,
    gpu_offload_supported,
    model_vocab_info,
    open_model,
    read_metadata,
)
from specchat.llm.vocab import VocabInfo, vocab_print


@contextmanager
def _vocab_only(path: Path, failure: str) -> Iterator[Any]:
    """A GGUF file opened for its metadata and vocabulary only (no weights), freed after."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = open_model(path, params, failure)
    try:
        yield model
    finally:
        llama_cpp.llama_model_free(model)


def read_model_shape(path: Path | str) -> ModelShape:
    """Layer count, trained context and KV widths from the metadata, no weights loaded; the
    file size counts every part of a split file (for gpufit)."""
    path = Path(path)
    with _vocab_only(path, f"llama.cpp could not read {path}") as model:
        # Metadata only: with vocab_only, llama.cpp's per-layer getters abort (no layers).
        meta = read_metadata(model)
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)))
    return shape_from_metadata(path.name, meta, n_vocab,
                               sum(p.stat().st_size for p in gguf_parts(path)))


def gpu_devices() -> list[Device]:
    """Devices that can hold offloaded layers, with the free memory their backend reports."""
    try:
        from llama_cpp._ggml import libggml
    except (ImportError, OSError):
        return []
    return [Device(name, free, total) for name, free, total in ggml_gpu_memory(libggml)]


def read_vocab_info(path: Path | str) -> VocabInfo:
    """The vocabulary of a GGUF file without its weights (vocab_only: ~0.2 s for 150k ids),
    to tell which models can draft for which without loading them."""
    path = Path(path)
    with _vocab_only(path, f"llama.cpp could not read the vocabulary of {path}") as model:
        return model_vocab_info(model, path.name, read_metadata(model))


def read_summary(path: Path | str) -> GgufSummary:
    """Architecture, quantization and vocabulary print of a GGUF file, no weights loaded
    (one vocab_only open, ~0.3 s for 150k ids: models/headers.py keeps what it read)."""
    path = Path(path)
    with _vocab_only(path, f"llama.cpp could not read the header of {path}") as model:
        meta = read_metadata(model)
        info = model_vocab_info(model, path.name, meta)
    return summary_of(meta, info)


def summary_of(meta: dict[str, str], info: VocabInfo) -> GgufSummary:
    """The summary of a file whose metadata and vocabulary were read already."""
    return GgufSummary(arch=meta.get("general.architecture", "?"),
                       quant=ftype_name(meta.get("general.file_type", "")),
                       vocab=vocab_print(info))


def ftype_name(value: str) -> str:
    """'15' (general.file_type) as 'Q4_K_M'; '?' for a missing or unknown one."""
    if not value.strip().isdigit():
        return "?"
    for key in dir(llama_cpp):
        if key.startswith("LLAMA_FTYPE_") and getattr(llama_cpp, key) == int(value):
            return key.removeprefix("LLAMA_FTYPE_").removeprefix("MOSTLY_")
    return "?"


def plain_chat_llama(path: Path | str, *, n_ctx: int, n_threads: int,
                     n_gpu_layers: int | None = None) -> Any:
    """llama-cpp-python's own high-level `Llama` on the same file, its defaults otherwise:
    the plain decoder `specchat bench` times itself against (the caller closes it).
    Layers are offloaded as load_model would, so both run on the same device."""
    check_gguf_file(Path(path))
    if n_gpu_layers is None:
        n_gpu_layers = -1 if gpu_offload_supported() else 0
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads,
                           n_threads_batch=n_threads, n_gpu_layers=n_gpu_layers, verbose=False)


# --- tools: requantize, system info -------------------------------------------------------------
def requantize(src: Path | str, dst: Path | str, ftype_name: str,
               n_threads: int | None = None) -> Path:
    """Write a copy of `src` quantized to `ftype_name` (e.g. "Q8_0", "Q2_K") at `dst`.

    Same vocabulary, slightly different weights: a real draft that disagrees sometimes.
    Written to a .part file first so a failure never leaves a file that looks complete.
    """
    src, dst = Path(src), Path(dst)
    check_gguf_file(src)
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype_name.upper()}", None)
    if ftype is None:
        known = sorted(k.removeprefix("LLAMA_FTYPE_MOSTLY_") for k in dir(llama_cpp)
                       if k.startswith("LLAMA_FTYPE_MOSTLY_"))
        raise UsageError(f"unknown quantization type {ftype_name!r}; known: {', '.join(known)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = n_threads or default_threads()
    part = dst.with_name(dst.name + ".part")
    LOG.errors.clear()
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(part).encode(),
                                        ctypes.byref(params))
    if rc != 0:
        part.unlink(missing_ok=True)
        raise ModelError(f"requantizing {src.name} to {ftype_name} failed: "
                         f"{log_reason(LOG.errors)}")
    os.replace(part, dst)
    return dst


def system_info() -> dict[str, str]:
    """Versions, the llama.cpp build and what it can offload to (for `specchat doctor`)."""
    backends, devices = _ggml_backends()
    gpu_names = [b for b in backends if b not in ("CPU", "BLAS", "RPC")]
    return {
        "python": sys.version.split()[0],
        "llama-cpp-python": str(getattr(llama_cpp, "__version__", "unknown")),
        "llama.cpp system info": llama_cpp.llama_print_system_info().decode().strip(" |"),
        "backends": ", ".join(backends) or "unknown",
        "backend": gpu_names[0] if gpu_names else "CPU",
        "devices": "; ".join(devices) or "none",
        "gpu offload": "yes" if gpu_offload_supported() else "no",
    }


def _ggml_backends() -> tuple[list[str], list[str]]:
    """Names of the compiled-in ggml backends and of the devices they found."""
    try:
        from llama_cpp._ggml import libggml
    except (ImportError, OSError):
        return [], []
    return ggml_registry(libggml)
