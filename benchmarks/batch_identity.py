"""Whether a row computed in a verify batch equals the row computed alone (docs/exactness.md).

    python benchmarks/batch_identity.py \
        ~/.cache/specchat/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --threads 2

For each context depth, 9 random tokens after a random prompt: their logits one token at a
time, then as batches of 2..9 from the same cache; prints '=' where every row of the batch is
bit-identical to the single-token rows, else the largest difference in logits. Nothing is
timed; flash attention is llama.cpp's default unless --flash-attn says otherwise, and the
weights are repacked unless --no-repack.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specchat.llm import load_model


def compare(model: object, depth: int, rng: np.random.Generator, sizes: range) -> str:
    m = model
    tokens, alone = singles(model, depth, rng, max(sizes))
    m.truncate(depth)  # type: ignore[attr-defined]
    cells = []
    for n in sizes:
        batch = m.eval(tokens[:n], list(range(n)))  # type: ignore[attr-defined]
        m.truncate(depth)  # type: ignore[attr-defined]
        same = np.array_equal(batch, alone[:n])
        cells.append(f"{n}:" + ("=" if same else f"{float(np.abs(batch - alone[:n]).max()):.3f}"))
    return f"depth {depth}: " + " ".join(cells)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depths", default="40,700,2000")
    ap.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--threads-too", action="store_true")
    ap.add_argument("--no-repack", dest="repack", action="store_false",
                    help="weights as the file stores them (specchat's --no-repack)")
    args = ap.parse_args()
    fa = {"auto": None, "on": True, "off": False}[args.flash_attn]
    model = load_model(args.model, n_ctx=4096, n_threads=args.threads, flash_attn=fa,
                       n_gpu_layers=0, exact=args.exact, repack=args.repack)
    label = f"{args.model.name} threads={args.threads} flash-attn={model.flash_attn} " \
            f"exact={model.exact}"
    for depth in (int(d) for d in args.depths.split(",")):
        print(f"{label} " + compare(model, depth, np.random.default_rng(depth), range(2, 10)),
              flush=True)
    if args.threads_too:
        one = load_model(args.model, n_ctx=4096, n_threads=1, flash_attn=fa, n_gpu_layers=0,
                         exact=args.exact, repack=args.repack)
        for depth in (int(d) for d in args.depths.split(",")):
            a, b = (singles(m, depth, np.random.default_rng(depth), 4)[1] for m in (model, one))
            print(f"{label} depth {depth}: single steps at {args.threads} and 1 threads: "
                  + ("=" if np.array_equal(a, b) else f"{float(np.abs(a - b).max()):.3f}"))
        one.close()
    model.close()
    return 0


def singles(model: object, depth: int, rng: np.random.Generator, n: int
            ) -> tuple[list[int], np.ndarray]:
    """n random tokens after a random prompt of `depth` tokens, and their logits one
    single-token step at a time (the model then holds the prompt and the tokens)."""
    m = model
    m.truncate(0)  # type: ignore[attr-defined]
    m.eval(rng.integers(100, 20000, depth).tolist(), [])  # type: ignore[attr-defined]
    tokens = rng.integers(100, 20000, n).tolist()
    return tokens, np.stack([m.eval([t], [0])[0].copy()  # type: ignore[attr-defined]
                             for t in tokens])


if __name__ == "__main__":
    raise SystemExit(main())
