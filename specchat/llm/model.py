"""A GGUF model with one KV cache (with lib.py and files.py, the only place that imports
llama_cpp).

Written against the low-level ctypes API of llama-cpp-python 0.3.x, not its high-level
`Llama` class, because speculative verification needs logits for a few chosen rows of a batch
and `Llama` either keeps one row or allocates n_ctx x n_vocab floats for all of them.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import llama_cpp
import numpy as np

from specchat.engine.protocol import ContextFullError
from specchat.errors import Cancelled, ModelError, UsageError
from specchat.fileio import Buffer
from specchat.llm.batch import chunk_spans, normalize_rows, rows_in_span
from specchat.llm.cbuf import log_reason
from specchat.llm.context import exact_context, start_size
from specchat.llm.exact import EXACT_ROWS, kv_types
from specchat.llm.ggml import default_threads
from specchat.llm.gguf import content_fingerprint
from specchat.llm.lib import (
    ABORT,
    ABORT_CALLBACK,
    ABORTABLE_BATCH,
    LOG,
    NO_ABORT,
    gpu_offload_supported,
    open_model,
    runs_on_cpu,
)
from specchat.llm.modeltext import ModelText
from specchat.llm.seqtree import TREE_SEQUENCES, TreeBatches, sequence_zero, sequences_for
from specchat.llm.sidefill import SideFills

DECODE_ABORTED = 2  # llama_decode's code for a batch its abort callback stopped
SMALL_BATCH = 64  # a verify batch, not a prefill


def load_model(path: Path | str, *, n_ctx: int = 4096, n_gpu_layers: int | None = None,
               n_threads: int | None = None, n_batch: int = 512,
               flash_attn: bool | None = None, verbose: bool = False,
               tree_sequences: int | None = None, exact: bool = False,
               ctx_start: int | None = None, repack: bool = True) -> LlamaModel:
    """Load a GGUF file with a fresh, empty KV cache of n_ctx positions, or of ctx_start
    (start_size) that grows up to n_ctx as eval() needs it (widen()): a cache's memory is
    written once when it is made, ~0.1 s per 1,000 positions on a 2-core CPU, which a short
    answer need not pay for.

    n_gpu_layers None offloads every layer when the build can, else none. n_ctx 0 means the
    model's trained context; more than that is a UsageError naming the limit. flash_attn None
    leaves it to llama.cpp ("auto"). tree_sequences: how many candidate branches one verify
    may hold (None: TREE_SEQUENCES where layers run on a GPU, else 1, see seqtree.py).
    exact: verify rows computed bit for bit like single steps where that can hold (every
    layer on the CPU, flash attention not off: llm/exact.py); `exact_rows` then says so.
    repack: weights copied at load into the layout the CPU's fastest decoding kernels read
    (llama.cpp's extra buffer types); False keeps them as the file has them.
    Raises ModelError (one line) for a missing file, a non-GGUF file or a failed load.
    """
    path = Path(path)
    LOG.verbose = verbose  # process-wide: llama.cpp has one log callback
    params = llama_cpp.llama_model_default_params()
    if n_gpu_layers is None:
        n_gpu_layers = -1 if gpu_offload_supported() else 0
    params.n_gpu_layers = n_gpu_layers  # negative: all layers
    params.use_extra_bufts = repack
    model = open_model(path, params, f"llama.cpp could not load {path}")
    try:
        n_ctx = _checked_ctx(n_ctx, int(llama_cpp.llama_model_n_ctx_train(model)), path)
        # llama.cpp cuts a batch to the context it was asked for (and asserts, killing the
        # process, on a longer one): so batches follow the context, whatever it rounds to.
        n_batch = max(1, min(n_batch, n_ctx))
        if tree_sequences is None:
            tree_sequences = TREE_SEQUENCES if n_gpu_layers != 0 else 1
        sequences = sequences_for(n_batch, tree_sequences)
        wanted = exact and n_gpu_layers == 0
        ctx, exact = exact_context(model, start_size(n_ctx, ctx_start, n_batch), n_batch,
                                    n_threads or default_threads(), flash_attn, sequences,
                                    wanted)
    except BaseException:
        llama_cpp.llama_model_free(model)
        raise
    loaded = LlamaModel(path, model, ctx, n_batch, gpu_layers=n_gpu_layers, sequences=sequences,
                        ctx_limit=n_ctx)
    loaded.flash_attn = True if exact else flash_attn
    loaded.exact_wanted, loaded.exact = wanted, exact
    loaded.repacked = repack
    return loaded


def _checked_ctx(n_ctx: int, trained: int, path: Path) -> int:
    if n_ctx == 0:
        return trained
    if 0 < trained < n_ctx:
        raise UsageError(f"--ctx {n_ctx} is more than {path.name} was trained for "
                         f"({trained} tokens); use --ctx {trained} or less (0 means {trained})")
    return n_ctx


# --- the model ------------------------------------------------------------------------------------
class LlamaModel(TreeBatches, SideFills, ModelText):
    """A loaded GGUF model and its KV cache; implements engine.protocol.LogitsModel (and
    TreeModel, through seqtree.TreeBatches; its text side is modeltext.ModelText).

    Invariant: after any call returns or raises (Ctrl-C included), `tokens` is exactly what the
    KV cache holds, so the engine can always truncate and continue.
    """

    def __init__(self, path: Path, model: Any, ctx: Any, n_batch: int, *,
                 gpu_layers: int = 0, sequences: int = 1, ctx_limit: int | None = None
                 ) -> None:
        self.path = path
        self._sequences = sequences  # the context's n_seq_max: branches one verify may hold
        self._gpu_layers = gpu_layers
        self._model, self._ctx = model, ctx
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._n_ctx = int(llama_cpp.llama_n_ctx(ctx))  # what llama.cpp made of the request
        self._ctx_limit = max(ctx_limit or 0, self._n_ctx)  # what widen() may grow it to
        # The longest decode call this context takes: what was asked, as llama.cpp set it.
        self._n_batch = min(n_batch, int(llama_cpp.llama_n_batch(ctx)),
                            int(llama_cpp.llama_n_ubatch(ctx)))
        self.flash_attn: bool | None = None  # None: llama.cpp's own choice ("auto")
        # Verify rows computed like single steps (llm/exact.py); wanted: loaded asking for it.
        self.exact = self.exact_wanted = False
        self.repacked = True  # weights in the CPU kernels' own layout (load_model's repack)
        self._fingerprint: tuple[tuple[int, ...], str] | None = None  # (stat, content)
        self._tokens: list[int] = []
        self._pieces: dict[int, bytes] = {}
        self._longest: int | None = None  # the most bytes one token stands for (fewest_tokens)
        self._eog: frozenset[int] | None = None
        self._metadata: dict[str, str] | None = None
        self._cancelled: Callable[[], bool] | None = None  # cancel_when()
        self._cancel_callback: Any = None  # its C callback, referenced while it may be called
        self._batch: Any = llama_cpp.llama_batch_init(n_batch, 0, TREE_SEQUENCES)
        # Every row belongs to sequence 0; set once (a tree batch puts it back after use).
        # token/pos/logits are filled per call through numpy views of the C arrays.
        sequence_zero(self._batch, n_batch)
        self._token_in = np.ctypeslib.as_array(self._batch.token, shape=(n_batch,))
        self._pos_in = np.ctypeslib.as_array(self._batch.pos, shape=(n_batch,))
        self._want_out = np.ctypeslib.as_array(self._batch.logits, shape=(n_batch,))

    # --- LogitsModel ---------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    @property
    def n_ctx(self) -> int:
        """The positions this model can hold: what eval() widens its context up to (--ctx)."""
        return self._ctx_limit

    @property
    def allocated(self) -> int:
        """The positions its context has memory for now (widen() grows it)."""
        return self._n_ctx

    @property
    def tokens(self) -> Sequence[int]:
        return tuple(self._tokens)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        """Append tokens to the cache; return float32 logits (len(logit_rows), n_vocab).

        Inputs longer than n_batch go in n_batch chunks, each asking llama.cpp for logits only
        on the rows it holds. If anything fails part way (Ctrl-C included), the chunks already
        decoded stay cached and `tokens` says so; the failing chunk is removed.
        """
        self._check_open(settle=False)
        n = len(tokens)
        self._drop_tree()  # before the exact context may be parked
        self._fit(len(self._tokens) + n)
        self._side_before_eval(n)
        rows = normalize_rows(logit_rows, n)
        start = len(self._tokens)
        out = np.empty((len(rows), self._n_vocab), dtype=np.float32)
        if n == 0:
            return out
        ids = np.asarray(tokens, dtype=np.int64)
        # A step's few ids are checked in Python: two numpy reductions cost more than that.
        low, high = (min(tokens), max(tokens)) if n <= SMALL_BATCH else (ids.min(), ids.max())
        if low < 0 or high >= self._n_vocab:
            raise ValueError(f"token ids must be in [0, {self._n_vocab}) for {self.path.name}")
        with ABORT.armed() as armed:
            callback = ABORT_CALLBACK if armed else self._cancel_callback
            abortable = callback is not None and n >= ABORTABLE_BATCH
            if abortable:
                llama_cpp.llama_set_abort_callback(self._ctx, callback, None)
            try:
                for lo, hi in chunk_spans(n, self._n_batch):
                    self._decode_chunk(ids[lo:hi], start + lo, rows_in_span(rows, lo, hi), out)
            except BaseException:
                self._forget_from(len(self._tokens))
                raise
            finally:
                if abortable:
                    llama_cpp.llama_set_abort_callback(self._ctx, NO_ABORT, None)
        ABORT.raise_pending_interrupt()  # Ctrl-C after the last node: the batch is whole
        return out

    def _decode_chunk(self, ids: np.ndarray, pos: int, wanted: list[tuple[int, int]],
                      out: np.ndarray) -> None:
        m = len(ids)
        self._token_in[:m] = ids
        self._pos_in[:m] = np.arange(pos, pos + m)
        self._want_out[:m] = 0
        for _, i in wanted:
            self._want_out[i] = 1
        self._batch.n_tokens = m
        LOG.errors.clear()
        rc = llama_cpp.llama_decode(self._ctx, self._batch)
        LOG.raise_pending_interrupt()  # the except in eval() drops this chunk again
        ABORT.raise_pending_interrupt()
        if rc == DECODE_ABORTED and self._cancelled is not None and self._cancelled():
            raise Cancelled("the answer was cancelled")
        if rc != 0:
            raise ModelError(f"llama_decode failed (code {rc}) at position {pos}: "
                             f"{log_reason(LOG.errors)}")
        self._tokens.extend(ids.tolist())
        for k, i in wanted:
            row = llama_cpp.llama_get_logits_ith(self._ctx, i)
            out[k] = np.ctypeslib.as_array(row, shape=(self._n_vocab,))

    def cancel_when(self, cancelled: Callable[[], bool] | None) -> None:
        """From now on a batch of ABORTABLE_BATCH tokens or more stops between two graph
        nodes once `cancelled()` is true, and eval() raises Cancelled, the cache holding the
        chunks decoded before (None: never). For a thread other than the main one, where
        Ctrl-C cannot arrive: a server's worker, whose client may leave mid-prefill."""
        self._cancelled = cancelled
        self._cancel_callback = None if cancelled is None else \
            llama_cpp.ggml_abort_callback(lambda _data: bool(cancelled()))

    def set_flash_attn(self, enabled: bool | None) -> None:
        """A new, empty KV cache with flash attention on or off (None: llama.cpp's default),
        same weights and threads."""
        self._renew(self._n_ctx, enabled)

    def _fit(self, needed: int) -> None:
        """Room for `needed` positions, the context widened if it holds fewer; beyond
        n_ctx, ContextFullError (the cache unchanged)."""
        if needed > self._ctx_limit:
            raise ContextFullError(needed, self._ctx_limit)
        if needed > self._n_ctx:
            held = len(self._tokens)
            self.widen(needed)
            if len(self._tokens) != held:  # what follows would be evaluated out of place
                raise ModelError(f"the cache of {self.path.name} could not be moved to a "
                                 "wider context; start the answer again")

    def widen(self, n: int) -> None:
        """A context of at least n positions where the limit allows, and at least twice
        what it held (a growing conversation widens a few times, not every turn); what the
        cache holds moves across bit for bit. Nothing changes when it already holds n."""
        if not n > self._n_ctx < self._ctx_limit:
            return
        self._check_open()  # a side fill settled first
        self._drop_tree()
        held = list(self._tokens)
        blob = self.save_state() if held else None
        self._renew(start_size(self._ctx_limit, max(n, 2 * self._n_ctx), self._n_batch),
                    self.flash_attn)
        if blob is not None:
            # A state that does not load leaves the cache empty: evaluated again, not wrong.
            with contextlib.suppress(ModelError):
                self.load_state(held, blob)

    def _renew(self, n_ctx: int, flash_attn: bool | None) -> None:
        self._check_open()
        n_threads = int(llama_cpp.llama_n_threads(self._ctx))
        ctx, exact = exact_context(self._model, n_ctx, self._n_batch, n_threads,
                                    flash_attn, self._sequences, self.exact_wanted)
        llama_cpp.llama_free(self._ctx)
        self._ctx, self._mem = ctx, llama_cpp.llama_get_memory(ctx)
        self._n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        self._tokens.clear()
        self._tree = None
        self.flash_attn, self.exact = (True if exact else flash_attn), exact

    @property
    def on_cpu(self) -> bool:
        """Whether every layer runs on the CPU (what flash attention's default follows)."""
        return runs_on_cpu(self._gpu_layers)

    @property
    def exact_rows(self) -> int | None:
        """The most rows a verify batch may hold for its rows to equal single steps bit for
        bit; None when no size does (not exact)."""
        return EXACT_ROWS if self.exact else None

    def set_threads(self, n: int) -> None:
        """Threads for the next decodes (llama.cpp applies it per call): fewer when other
        processes compete for the cores."""
        self._check_open()
        llama_cpp.llama_set_n_threads(self._ctx, n, n)

    def truncate(self, n: int) -> None:
        """Forget every position >= n."""
        self._check_open()
        self._drop_tree()
        if max(n, 0) < len(self._tokens):
            self._forget_from(max(n, 0))

    def _forget_from(self, n: int) -> None:
        """Make cache and `tokens` both hold exactly the first n tokens (or nothing)."""
        if llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
            del self._tokens[n:]
        else:
            # Recurrent state cannot drop only its tail: start over rather than lie.
            llama_cpp.llama_memory_clear(self._mem, True)
            self._tokens.clear()

    # --- saved states (the prompt cache) ------------------------------------------------------
    @property
    def state_key(self) -> str:
        """What a saved state is only valid for: this model's content (not its name, size or
        mtime, which a replaced file can keep), under this llama.cpp build, placement and
        attention kernel (a state holds raw KV tensors in their layout), and the weights'
        layout (other kernels, other floats in the cache)."""
        st = self.path.stat()
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if self._fingerprint is None or self._fingerprint[0] != seen:
            self._fingerprint = (seen, content_fingerprint(self.path))
        return (f"gguf {self._fingerprint[1]}|"
                f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}|"
                f"gpu layers {self._gpu_layers}|flash attention {self.flash_attn}|"
                f"kv types {kv_types(self.exact)}" + ("" if self.repacked else "|not repacked"))

    def save_state(self) -> memoryview:
        """The KV cache of `tokens` as one opaque blob (load_state puts it back). The buffer
        llama.cpp wrote is the blob: a long context's state is hundreds of MB, and each copy
        of it would be held at once with the cache itself."""
        self._check_open()
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, 0))
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, 0))
        if written <= 0:
            raise ModelError(f"llama.cpp could not save the state of {self.path.name}")
        return memoryview(buf).cast("B")[:written]

    def load_state(self, tokens: Sequence[int], blob: Buffer) -> None:
        """Replace the cache with a blob from save_state() that holds exactly `tokens`; a
        writable blob (save_state's, a bytearray) is read where it lies, not copied.

        On any failure the cache is left empty (never half loaded) and ModelError is raised.
        """
        self._check_open()
        self._fit(len(tokens))
        llama_cpp.llama_memory_clear(self._mem, True)
        self._tokens.clear()
        view = memoryview(blob).cast("B")
        kind = ctypes.c_uint8 * len(view)
        buf = kind.from_buffer_copy(view) if view.readonly else kind.from_buffer(view)
        read = int(llama_cpp.llama_state_seq_set_data(self._ctx, buf, len(view), 0))
        del buf  # the blob's buffer is released with it
        if read != len(view) or self.cached_positions() != len(tokens):
            llama_cpp.llama_memory_clear(self._mem, True)
            raise ModelError(f"a saved state does not fit {self.path.name}")
        self._tokens.extend(int(t) for t in tokens)

    def cached_positions(self) -> int:
        """How many positions llama.cpp's cache holds (== len(tokens); for checks and tests)."""
        self._check_open()
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0)) + 1

    # --- lifetime --------------------------------------------------------------------------------
    def _check_open(self, settle: bool = True) -> None:
        if self._ctx is None:
            raise ModelError(f"{self.path.name} was closed")
        if settle:  # whatever is not a prefill batch sees the exact context, filled
            self._settle_side()

    def close(self) -> None:
        """Free the context, batch and weights; safe to call twice."""
        if self._ctx is not None:
            self._discard_side()
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = self._model = None
            self._tokens.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit llama_cpp may be gone
            pass
