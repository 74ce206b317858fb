"""Whether llama.cpp's thread count changes the numbers (docs/exactness.md).

Does llama.cpp's thread count change the numbers? One prompt, one model, 1 and 2 threads,
flash attention at llama.cpp's default (auto) and off.

    python benchmarks/threads_numerics.py ~/.cache/specchat/models/SmolLM2-135M-Instruct.Q4_1.gguf

For each setting: the largest difference between the logits of the prompt's last 8 rows at 1
and at 2 threads, the same for 24 greedy decode steps, whether the greedy tokens agree, and
(repeats with the same thread count) whether a run is reproducible at all. Then, with flash
attention at its default, where 48 greedy tokens at 1 and 2 threads first differ and the top-2
margin of the logits there. Nothing is timed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from specchat.llm import load_model

ROOT = Path(__file__).resolve().parent.parent


def greedy(model: object, prompt: list[int], threads: int, steps: int
           ) -> tuple[np.ndarray, list[int], list[np.ndarray]]:
    """Prompt rows (last 8), greedy tokens and their logits, from an empty cache."""
    model.truncate(0)  # type: ignore[attr-defined]
    model.set_threads(threads)  # type: ignore[attr-defined]
    rows = model.eval(prompt, list(range(len(prompt) - 8, len(prompt))))  # type: ignore
    last, tokens, logits = rows[-1], [], []
    for _ in range(steps):
        token = int(np.argmax(last))
        tokens.append(token)
        logits.append(last)
        last = model.eval([token], [0])[0]  # type: ignore[attr-defined]
    return rows, tokens, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    args = parser.parse_args()
    text = (ROOT / "specchat" / "engine" / "loop.py").read_text()[:4000]
    for flash in (None, False):
        with load_model(args.model, n_ctx=2048, n_gpu_layers=0, n_threads=2,
                        flash_attn=flash) as model:
            prompt = model.tokenize(text + "\n\nWhat does _prefill do?", add_special=True)
            one, two, again = (greedy(model, prompt, t, 24) for t in (1, 2, 1))
            print(f"{args.model.name} flash attention {'auto' if flash is None else 'off'}: "
                  f"prompt rows 1 vs 2 threads max|d| {np.abs(one[0] - two[0]).max():.3g}; "
                  f"decode max|d| {np.abs(np.array(one[2]) - np.array(two[2])).max():.3g}; "
                  f"greedy tokens equal: {one[1] == two[1]}; "
                  f"1 thread twice bit-identical: {np.array_equal(one[0], again[0])}")
            if flash is None:
                _, a, _ = greedy(model, prompt, 1, 48)
                _, b, rows = greedy(model, prompt, 2, 48)
                first = next((i for i in range(48) if a[i] != b[i]), None)
                if first is None:
                    print("  48 greedy tokens equal at 1 and 2 threads")
                else:
                    top = np.sort(rows[first])[-2:]
                    print(f"  greedy tokens first differ at step {first}: top-2 margin "
                          f"{top[1] - top[0]:.3f} at 2 threads")


if __name__ == "__main__":
    main()
