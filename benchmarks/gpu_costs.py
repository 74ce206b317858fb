"""What this machine's GPU charges, beside a simulated cost profile (docs/gpu.md).

    python benchmarks/gpu_costs.py --models DIR [DIR ...] [--profile rtx3090-8b-q4_0]
        [--out DIR] [--synthetic] [--gpu-layers -1]

Finds GGUF files under the folders (a Qwen2.5 target and draft if there are two of one
family, else the largest alone), measures them with specchat's own calibration (the fastest
of 3 evals of n tokens, logits on every row, n = 1..17), a 512-token prefill and, for a
draft, its step; writes that as a cost profile (OUT/measured-profile.json, the format
`specchat bench --cost-profile` reads) and prints it beside the simulated profile. With no
model found and --synthetic, it first writes a random-weight model of Qwen2.5-Coder-0.5B's
shape: what an eval costs depends on the shape and the hardware, not on the weights.
benchmarks/gpu_check.sh runs this on the day a GPU is lent; it is never part of CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.backend.calibration import measure
from specchat.bench import profiles
from specchat.engine.cost import MAX_N
from specchat.errors import SpecchatError

PREFILL_TOKENS = 512
QWEN_05B = {"vocab": 151936, "embd": 896, "layers": 24, "ff": 4864, "heads": 14, "kv": 2}


@dataclass(frozen=True)
class Measured:
    """One model's costs here: seconds of an eval of n tokens for n = 1..MAX_N, and a
    prefill's tokens per second."""

    path: Path
    seconds: tuple[float, ...]
    prefill_tokens_per_second: float

    def costs(self) -> dict[str, Any]:
        step = self.seconds[0]
        return {"model": self.path.name, "step_seconds": step,
                "batch_ratios": [max(1.0, round(s / step, 4)) for s in self.seconds],
                "prefill_tokens_per_second": round(self.prefill_tokens_per_second, 1)}


def find_models(folders: Sequence[Path]) -> list[Path]:
    """Every .gguf file under the folders, largest first (a folder that is missing is
    skipped: the copy a device is given may hold none)."""
    found = {p.resolve() for f in folders if f.is_dir() for p in f.rglob("*.gguf")
             if p.is_file()}
    return sorted(found, key=lambda p: (-p.stat().st_size, p.name))


def pick_pair(models: Sequence[Path]) -> tuple[Path | None, Path | None]:
    """(target, draft): the largest and the smallest Qwen2.5 files when there are two (one
    vocabulary), else the largest file and no draft."""
    if not models:
        return None, None
    qwen = [m for m in models if "qwen2.5" in m.name.lower()]
    if len(qwen) >= 2:
        return qwen[0], qwen[-1]
    return models[0], None


def measure_file(path: Path, gpu_layers: int, repeats: int = 3) -> Measured:
    """Calibration's measurement on this file, every layer on the GPU by default."""
    from specchat.llm.model import load_model

    with load_model(path, n_ctx=2048, n_gpu_layers=gpu_layers) as model:
        table = measure(model, tuple(range(1, MAX_N + 1)), repeats)
        filler = [(7 + 31 * i) % model.n_vocab for i in range(PREFILL_TOKENS)]
        best = float("inf")
        for _ in range(2):
            model.truncate(0)
            start = time.perf_counter()
            model.eval(filler, [-1])
            best = min(best, time.perf_counter() - start)
        model.truncate(0)
    return Measured(path, tuple(table[n] for n in range(1, MAX_N + 1)),
                    PREFILL_TOKENS / best)


def profile_document(name: str, target: Measured, draft: Measured | None,
                     source: str) -> dict[str, Any]:
    """A cost profile in the format profiles.parse reads."""
    return {"format": profiles.FORMAT, "version": profiles.VERSION, "name": name,
            "source": source, "target": target.costs(),
            "draft": None if draft is None else draft.costs(), "overhead_seconds": 0.00015}


def comparison(measured: profiles.CostProfile, simulated: profiles.CostProfile) -> list[str]:
    """Lines of text: the verify batch of n over one step, here and in the simulation, and
    the draft step over a target step."""
    lines = [f"{'batch n':>8} {'measured':>9} {'simulated':>10}   (x one plain step)",
             f"{'1 step':>8} {measured.target.step_seconds * 1000:8.2f}ms "
             f"{simulated.target.step_seconds * 1000:8.2f}ms"]
    for n in range(2, MAX_N + 1):
        here = measured.target.table.ratio(n)
        there = simulated.target.table.ratio(n)
        lines.append(f"{n:>8} {here:9.2f} {there:10.2f}")
    lines.append(f"{'prefill':>8} {measured.target.prefill_tokens_per_second:7.0f}/s "
                 f"{simulated.target.prefill_tokens_per_second:8.0f}/s")
    for label, profile in (("measured", measured), ("simulated", simulated)):
        d = profile.draft
        c = "-" if d is None else f"{d.step_seconds / profile.target.step_seconds:.3f}"
        lines.append(f"draft step / target step, {label}: {c}")
    return lines


def write_synthetic(path: Path, dims: dict[str, int] = QWEN_05B, seed: int = 0) -> Path:
    """A random-weight GGUF of Qwen2's architecture with these dimensions (F16; byte-level
    tokens so llama.cpp's tokenizer loads). Needs the `gguf` package."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    embd, ff, layers = dims["embd"], dims["ff"], dims["layers"]
    kv = embd // dims["heads"] * dims["kv"]
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_context_length(4096)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(dims["heads"])
    writer.add_head_count_kv(dims["kv"])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    tokens = [*_byte_tokens(), "!!"]  # llama.cpp wants at least one merge, and its result
    tokens += [f"<t{i}>" for i in range(dims["vocab"] - len(tokens))]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(["! !"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(len(tokens) - 1)

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(embd, dtype=np.float32)
    writer.add_tensor("token_embd.weight", weight(dims["vocab"], embd))
    writer.add_tensor("output_norm.weight", ones)
    for i in range(layers):
        block = {"attn_norm.weight": ones, "ffn_norm.weight": ones,
                 "attn_q.weight": weight(embd, embd), "attn_q.bias": np.zeros(embd, np.float32),
                 "attn_k.weight": weight(kv, embd), "attn_k.bias": np.zeros(kv, np.float32),
                 "attn_v.weight": weight(kv, embd), "attn_v.bias": np.zeros(kv, np.float32),
                 "attn_output.weight": weight(embd, embd), "ffn_gate.weight": weight(ff, embd),
                 "ffn_up.weight": weight(ff, embd), "ffn_down.weight": weight(embd, ff)}
        for name, value in block.items():
            writer.add_tensor(f"blk.{i}.{name}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _byte_tokens() -> list[str]:
    """GPT-2's byte-level alphabet (256 printable stand-ins for the bytes)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", type=Path, required=True,
                    help="folders to look for .gguf files in")
    ap.add_argument("--profile", default="rtx3090-8b-q4_0",
                    help="the simulated profile to compare with (file or built-in name)")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--synthetic", action="store_true",
                    help="with no model found, measure a random-weight Qwen2.5-0.5B shape")
    ap.add_argument("--gpu-layers", type=int, default=-1)
    args = ap.parse_args(argv)
    try:
        simulated = profiles.load(args.profile)  # a bad name fails before any loading
    except SpecchatError as exc:
        print(f"gpu_costs: {exc}", file=sys.stderr)
        return 2
    if not args.out.is_dir():
        print(f"gpu_costs: --out {args.out} is not a folder", file=sys.stderr)
        return 2
    target, draft = pick_pair(find_models(args.models))
    source = "measured here with specchat's calibration"
    if target is None:
        if not args.synthetic:
            print("gpu_costs: no .gguf file found (add --synthetic to measure a random-weight "
                  "model of Qwen2.5-0.5B's shape)", file=sys.stderr)
            return 1
        target = write_synthetic(args.out / "synthetic-qwen2-0.5b-f16.gguf")
        source += " (random weights, Qwen2.5-0.5B's shape, F16)"
    measured_target = measure_file(target, args.gpu_layers)
    measured_draft = measure_file(draft, args.gpu_layers) if draft is not None else None
    document = profile_document("measured-here", measured_target, measured_draft, source)
    out = args.out / "measured-profile.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"measured {target.name}" + (f" and {draft.name}" if draft else "") + f" -> {out}")
    for line in comparison(profiles.parse(document, str(out)), simulated):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
