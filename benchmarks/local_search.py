"""What the draft search costs a start with many local models (README.md).

What the draft search costs a start with many local models: N ollama models (hard links of
one real GGUF, each with its own manifest and blob) and a target with no preset draft, the
search run cold (no header remembered) until every header is read, then warm, several times.

    python benchmarks/local_search.py -n 50 --rounds 5 \\
        --draft ~/.cache/specchat/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --target /tmp/smol-f32.gguf  # the same model at F32 (llama_model_quantize, ALL_F32)

Prints the seconds of each cold start (with how many headers it left for later) and the
median and maximum of the warm ones: the warm figure is what every later start pays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def lay_out(root: Path, draft: Path, n: int) -> None:
    for i in range(n):
        digest = hashlib.sha256(f"m{i}".encode()).hexdigest()
        blob = root / "blobs" / f"sha256-{digest}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.link(draft, blob)
        manifest = root / "manifests" / "registry.test" / "library" / f"m{i}" / "latest"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"layers": [{
            "mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("-n", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.draft.parent) as tmp:
        os.environ.update({"OLLAMA_MODELS": f"{tmp}/ollama", "SPECCHAT_HOME": f"{tmp}/home",
                           "HOME": f"{tmp}/home", "HF_HUB_CACHE": f"{tmp}/hf",
                           "LLAMA_CACHE": f"{tmp}/llama"})
        lay_out(Path(tmp) / "ollama", args.draft, args.n)
        from specchat.models.pairing import find_draft

        unchecked = 1
        while unchecked:
            begin = time.perf_counter()
            found = find_draft(args.target)
            unchecked = found.unchecked
            print(f"cold: {time.perf_counter() - begin:.2f} s, {unchecked} headers left "
                  f"for later, draft {found.model.name if found.model else None}")
        warm = []
        for _ in range(args.rounds):
            begin = time.perf_counter()
            find_draft(args.target)
            warm.append(time.perf_counter() - begin)
        print(f"warm ({args.n} models, {args.rounds} rounds): median "
              f"{statistics.median(warm) * 1000:.0f} ms, max {max(warm) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
