"""llama.cpp itself: the library's log and abort callbacks, and reading a GGUF file's
model, metadata and vocabulary. With model.py and files.py, the only place in specchat that
imports llama_cpp.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from specchat.errors import ModelError
from specchat.llm.cbuf import log_reason, read_snprintf, token_or_none
from specchat.llm.gguf import check_gguf_file
from specchat.llm.hooks import AbortFlag, LogSink
from specchat.llm.vocab import VOCAB_TYPES, VocabInfo

# --- llama.cpp's log --------------------------------------------------------------------------
# llama.cpp logs from C straight to stderr, and llama-cpp-python's own callback prints
# everything unless its logger is configured; ours is quiet unless verbose. The callback
# object must stay referenced for as long as the library may call it: forever.
LOG = LogSink()
LOG_CALLBACK = llama_cpp.llama_log_callback(LOG)
llama_cpp.llama_log_set(LOG_CALLBACK, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()

# Ctrl-C inside a long llama_decode aborts the batch at once instead of after seconds of
# prompt processing (hooks.AbortFlag says how). Installed only for big batches
# (ABORTABLE_BATCH): a Python call per graph node would slow every decode step.
ABORT = AbortFlag()
ABORT_CALLBACK = llama_cpp.ggml_abort_callback(ABORT)
NO_ABORT = llama_cpp.ggml_abort_callback(0)
ABORTABLE_BATCH = 32


# --- loading ------------------------------------------------------------------------------------
def gpu_offload_supported() -> bool:
    """True when this llama.cpp build has a GPU backend and it found a device."""
    return bool(llama_cpp.llama_supports_gpu_offload())


def runs_on_cpu(n_gpu_layers: int) -> bool:
    """Whether a model loaded with n_gpu_layers (negative: all) keeps every layer on the CPU."""
    return n_gpu_layers == 0 or not gpu_offload_supported()


def create_interruptibly(create: Callable[[], Any], free: Callable[[Any], None]) -> Any:
    """A llama.cpp object from `create` (a model, a context), or None when it failed. Ctrl-C
    during the call frees whatever was made and raises KeyboardInterrupt here, once."""
    with ABORT.armed():
        made = create()
        if made and (ABORT.interrupted or LOG.interrupted):
            free(made)
            made = None
    ABORT.raise_pending_interrupt()
    LOG.raise_pending_interrupt()
    return made


def open_model(path: Path, params: Any, failure: str) -> Any:
    """llama_model_load_from_file with specchat's checks; ModelError(failure: why) if not."""
    check_gguf_file(path)
    LOG.errors.clear()
    # Ctrl-C aborts the load at once through its progress callback (exit 130 upstream),
    # instead of being swallowed by a ctypes callback with a traceback.
    keep_going = llama_cpp.llama_progress_callback(lambda _p, _d: not ABORT.interrupted)
    params.progress_callback = keep_going  # referenced until the call returns
    model = create_interruptibly(
        lambda: llama_cpp.llama_model_load_from_file(str(path).encode(), params),
        llama_cpp.llama_model_free)
    if not model:
        raise ModelError(f"{failure}: {log_reason(LOG.errors)}")
    return model


def read_metadata(model: Any) -> dict[str, str]:
    """GGUF key/value metadata (scalars as strings; arrays are not exposed by llama.cpp)."""
    def read(getter: Any, index: int) -> str:
        raw = read_snprintf(lambda buf, size: int(getter(model, index, buf, size)))
        return raw.decode("utf-8", errors="replace")

    return {read(llama_cpp.llama_model_meta_key_by_index, i):
            read(llama_cpp.llama_model_meta_val_str_by_index, i)
            for i in range(llama_cpp.llama_model_meta_count(model))}


CONTROL_ATTR = 8  # enum llama_token_attr: LLAMA_TOKEN_ATTR_CONTROL


def eog_tokens(vocab: Any) -> frozenset[int]:
    is_eog = llama_cpp.llama_vocab_is_eog
    return frozenset(t for t in range(llama_cpp.llama_vocab_n_tokens(vocab)) if is_eog(vocab, t))


def is_control_token(vocab: Any, token: int) -> bool:
    """Whether llama.cpp marks the token a control token (LLAMA_TOKEN_ATTR_CONTROL)."""
    return bool(int(llama_cpp.llama_vocab_get_attr(vocab, token)) & CONTROL_ATTR)


def model_vocab_info(model: Any, name: str, metadata: dict[str, str],
                eog: frozenset[int] | None = None) -> VocabInfo:
    """What vocab.check_compatible compares (reads every token's text and kind: ~0.2 s)."""
    v = llama_cpp.llama_model_get_vocab(model)
    n = int(llama_cpp.llama_vocab_n_tokens(v))
    specials = {key: token_or_none(getattr(llama_cpp, f"llama_vocab_{key}")(v))
                for key in ("bos", "eos", "eot", "sep", "nl", "pad")}
    get_text, get_attr = llama_cpp.llama_vocab_get_text, llama_cpp.llama_vocab_get_attr
    return VocabInfo(
        name=name,
        vocab_type=VOCAB_TYPES.get(int(llama_cpp.llama_vocab_type(v)), "unknown"),
        pre=metadata.get("tokenizer.ggml.pre", ""),
        n_tokens=n,
        specials=specials,
        add_bos=bool(llama_cpp.llama_vocab_get_add_bos(v)),
        add_eos=bool(llama_cpp.llama_vocab_get_add_eos(v)),
        eog=eog_tokens(v) if eog is None else eog,
        texts=[get_text(v, t) or b"" for t in range(n)],
        types=np.fromiter((get_attr(v, t) for t in range(n)), dtype=np.int32, count=n),
    )
