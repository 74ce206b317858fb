"""How a CPU target computes a verify batch's rows bit for bit as single-token steps would.

`--spec off` decodes one token per llama_decode call; speculation verifies k drafted tokens
in one call of k + 1 rows. For a temperature-0 answer to be `off`'s token for token, every
row must be the same floats a single step gives. On llama.cpp's CPU backend two kernels
break that (docs/exactness.md has the measurements and the source lines):

- flash attention takes a split-KV path for a single query row once the cache view holds
  512 cells or more, with K and V both f16 or f32: each thread attends to its share of the
  cells and the partial sums are merged, in an order a batch row (attended to by one thread)
  never uses. It also makes a single step's floats depend on the thread count. A V cache in
  bf16 (K stays f16) turns that path off: every row, alone or in a batch, is computed whole
  by one thread, whatever the thread count.
- the repacked Q4_K/Q4_0 matrix kernels multiply blocks of 4 batch rows at once, summing in
  another order than the one-row kernel that single steps and the last n % 4 rows use. So a
  verify batch holds at most EXACT_ROWS rows: then all of them take the one-row kernel.

Neither applies where layers run on a GPU (other kernels, not measured here), and flash
attention must be on (without it every batch size differs).

What it costs, and why no other V type does better in this llama.cpp:

- a long prefill: the tiled flash attention kernel that evaluates a batch of 64 rows or more
  (a GEMM over tiles of queries and cells) also requires K and V of one type, f16 or f32. So
  the types that keep single steps off the split path also keep a prefill on the per-row
  kernel, every query row reading every cell on its own: about 1.5x the time. So a long
  prefill runs in a plain context and its cache moves over (llm/sidefill.py), from an empty
  cache as after cached tokens (a warm prompt cache, a later turn), which are copied across
  first: EXACT_PREFILL_COST.
- an f32 V cache is no way out: llama.cpp's graph casts an f32 K or V to f16 before flash
  attention (llama-graph.cpp, build_attn_mha), so K f16 with V f32 reaches the kernel as f16
  and f16, and single steps take the split path again (not exact), while every graph pays
  for converting the whole V cache.
"""

from __future__ import annotations

GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30  # ggml.h's enum value; the 0.3.x bindings do not name it
EXACT_ROWS = 3  # most rows one verify batch holds when exact (the repacked kernels: 4)
# A long prefill into an exact target over a plain one's, cold or after cached tokens: the
# paired rounds of benchmarks/prefill_modes.py, with and without --warm (docs/performance.md
# has the runs and their intervals; 1.5-1.7x before llm/sidefill.py).
EXACT_PREFILL_COST = 1.0


def kv_types(exact: bool) -> tuple[int, int]:
    """The K and V cache types a context is created with."""
    return (GGML_TYPE_F16, GGML_TYPE_BF16) if exact else (GGML_TYPE_F16, GGML_TYPE_F16)
