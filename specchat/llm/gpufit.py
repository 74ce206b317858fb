"""How many layers of the target, then the draft, fit in free GPU memory (pure arithmetic).

llama.cpp offloads whole layers: `n_gpu_layers = k` puts the first k repeating blocks (their
weights and their part of the KV cache) on the device, and k = n_layer + 1 adds the output
layer. The estimate, per model:

  weights    the GGUF file size (all split parts), shared evenly over n_layer + 1 slots, the
             extra slot being the output layer. The token embeddings stay on the CPU in
             llama.cpp, so counting the whole file over-estimates a little, on the safe side.
  KV cache   f16 K and V for every offloaded layer: 2 bytes x n_ctx x (n_embd_k_gqa +
             n_embd_v_gqa) per layer.
  compute    llama.cpp's work buffer for one n_batch step, dominated by the logits rows:
             4 bytes x n_batch x (n_vocab + 4 n_embd); only when anything is offloaded.

docs/gpu-fit.md compares each term with the buffer sizes llama.cpp reports: all within a few
percent and on the safe side. A margin is kept free on every device (the larger of 512 MiB
and 5% of its memory) for the driver, other programs and estimation error. The target is
placed first: a draft only pays when the target runs fast, so the draft gets what the target
leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
MIN_MARGIN = 512 * MIB
MARGIN_SHARE = 0.05
KV_BYTES = 2  # f16, llama.cpp's default cache type


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs from one GGUF model (read from its metadata)."""

    name: str
    file_bytes: int
    n_layer: int
    n_ctx_train: int
    n_embd: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    n_vocab: int


@dataclass(frozen=True)
class Device:
    name: str
    free: int
    total: int


@dataclass(frozen=True)
class Placement:
    """Layers of one model on the device: `layers` of `slots` (n_layer + 1), and their bytes."""

    name: str
    layers: int
    slots: int
    bytes: int

    @property
    def complete(self) -> bool:
        return self.layers >= self.slots

    @property
    def n_gpu_layers(self) -> int:
        """The value for llama.cpp: -1 (every layer) when the model fits entirely."""
        return -1 if self.complete else self.layers

    def describe(self) -> str:
        if self.complete:
            return f"{self.name} all {self.slots} layers ({gib(self.bytes)})"
        return f"{self.name} {self.layers} of {self.slots} layers ({gib(self.bytes)})"


@dataclass(frozen=True)
class FitPlan:
    target: Placement
    draft: Placement | None
    devices: tuple[Device, ...]

    def placements(self) -> list[Placement]:
        return [self.target] + ([self.draft] if self.draft is not None else [])

    def summary(self) -> str:
        """One line: what goes on the GPU, from how much free memory."""
        free = sum(d.free for d in self.devices)
        where = ", ".join(d.name for d in self.devices)
        return (f"GPU layers: {'; '.join(p.describe() for p in self.placements())}; "
                f"{gib(free)} free on {where}")

    def shortfall(self) -> str | None:
        """One line when some model does not fit entirely (None when everything does)."""
        if all(p.complete for p in self.placements()):
            return None
        return (f"{self.summary()}; the rest runs on the CPU (a smaller --ctx or quantization "
                f"fits more; --n-gpu-layers N overrides)")


def shape_from_metadata(name: str, meta: dict[str, str], n_vocab: int,
                        file_bytes: int) -> ModelShape:
    """A ModelShape from GGUF key/values ({arch}.block_count, ...); absent widths default
    the way llama.cpp defaults them (head size n_embd / n_head, K/V heads = heads)."""
    arch = meta.get("general.architecture", "")

    def number(key: str, default: int) -> int:
        try:
            return int(meta.get(f"{arch}.{key}", default))
        except ValueError:  # a per-layer array: llama.cpp does not expose arrays as text
            return default

    n_embd = number("embedding_length", 0)
    n_head = max(1, number("attention.head_count", 1))
    n_head_kv = number("attention.head_count_kv", n_head)
    key = number("attention.key_length", n_embd // n_head)
    return ModelShape(name=name, file_bytes=file_bytes, n_layer=number("block_count", 0),
                      n_ctx_train=number("context_length", 0), n_embd=n_embd,
                      n_embd_k_gqa=key * n_head_kv,
                      n_embd_v_gqa=number("attention.value_length", key) * n_head_kv,
                      n_vocab=n_vocab)


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def kv_bytes_per_layer(shape: ModelShape, n_ctx: int) -> int:
    return KV_BYTES * n_ctx * (shape.n_embd_k_gqa + shape.n_embd_v_gqa)


def compute_bytes(shape: ModelShape, n_batch: int) -> int:
    return 4 * n_batch * (shape.n_vocab + 4 * shape.n_embd)


def margin(devices: tuple[Device, ...]) -> int:
    return sum(max(MIN_MARGIN, int(d.total * MARGIN_SHARE)) for d in devices)


def place(shape: ModelShape, budget: int, n_ctx: int, n_batch: int) -> Placement:
    """As many layers of `shape` as fit in `budget` bytes (0 when not even one does)."""
    slots = shape.n_layer + 1
    weights = shape.file_bytes / slots
    per_layer = weights + kv_bytes_per_layer(shape, n_ctx)
    fixed = compute_bytes(shape, n_batch)
    full = int(fixed + shape.n_layer * per_layer + weights)
    if full <= budget:
        return Placement(shape.name, slots, slots, full)
    layers = max(0, min(shape.n_layer, int((budget - fixed) // per_layer)))
    used = int(fixed + layers * per_layer) if layers else 0
    return Placement(shape.name, layers, slots, used)


def plan(devices: list[Device], target: ModelShape, draft: ModelShape | None, *,
         n_ctx: int, n_batch: int = 512) -> FitPlan:
    """Layers for the target first, then the draft, within the devices' free memory."""
    found = tuple(devices)
    budget = sum(d.free for d in found) - margin(found)
    first = place(target, budget, n_ctx, n_batch)
    second = None
    if draft is not None:
        second = place(draft, budget - first.bytes, n_ctx, n_batch)
    return FitPlan(first, second, found)
