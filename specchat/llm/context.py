"""A llama.cpp context for a loaded model: batch and sequence layout, threads, flash attention,
and the cache types that make an exact target (llm/exact.py)."""

from __future__ import annotations

from typing import Any

import llama_cpp

from specchat.errors import ModelError
from specchat.llm.cbuf import log_reason
from specchat.llm.exact import kv_types
from specchat.llm.lib import LOG, create_interruptibly

CTX_STEP = 256  # positions a context is sized in


def exact_context(model: Any, n_ctx: int, n_batch: int, n_threads: int,
                   flash_attn: bool | None, sequences: int, exact: bool) -> tuple[Any, bool]:
    """A context, exact when asked and possible (flash attention not off; a model that
    refuses a V cache type unlike K's, as MLA models do, gets a plain one)."""
    if exact and flash_attn is not False:
        try:
            return new_context(model, n_ctx, n_batch, n_threads, True, sequences,
                                 exact=True), True
        except ModelError:
            pass
    return new_context(model, n_ctx, n_batch, n_threads, flash_attn, sequences), False


def new_context(model: Any, n_ctx: int, n_batch: int, n_threads: int,
                  flash_attn: bool | None = None, sequences: int = 1,
                  exact: bool = False) -> Any:
    params = llama_cpp.llama_context_default_params()
    params.type_k, params.type_v = kv_types(exact)
    if flash_attn is not None:
        params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                                  else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = n_batch  # one llama_decode call = one ubatch
    # Trees of candidates use a sequence per leaf (seqtree.py); one unified cache serves them
    # all, so n_ctx is not split between sequences and shared cells are stored once.
    # llama.cpp reserves an output row per sequence: never more sequences than batch rows.
    params.n_seq_max = sequences
    params.kv_unified = True
    params.n_threads = params.n_threads_batch = n_threads
    params.no_perf = True
    if hasattr(params, "swa_full"):
        # Sliding-window models (Gemma 3) must keep every position, or cutting the cache back
        # after a rejected draft could need cells the window already dropped.
        params.swa_full = True
    ctx = create_interruptibly(lambda: llama_cpp.llama_init_from_model(model, params),
                               llama_cpp.llama_free)
    if not ctx:
        raise ModelError(f"llama.cpp could not create a {n_ctx}-token context: "
                         f"{log_reason(LOG.errors)}")
    return ctx


def start_size(limit: int, wanted: int | None, n_batch: int) -> int:
    """Positions a context starts with: `wanted` rounded up to CTX_STEP (None: the limit),
    never fewer than a batch (a smaller context would cut prefill batches short, and batch
    sizes change the floats), never more than the limit."""
    if wanted is None:
        return limit
    return min(limit, max(n_batch, -(-wanted // CTX_STEP) * CTX_STEP))
