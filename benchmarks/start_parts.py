"""What an everyday start spends in specchat's code besides loading models (docs/performance.md).

For one or more checkouts side by side:

    python benchmarks/start_parts.py --tree /path/to/old/checkout --tree . --rounds 5

Per checkout and round, each in a fresh process on PYTHONPATH=TREE: the time to import the CLI
and register every command (what `specchat ask` pays before it reads a flag), and the vocabulary
check of the default target and draft (`backend.loading.text_vocabs`, after both models are
loaded; the models' end-of-generation sets are read afresh, as at a start). The user's own
model cache and headers memo are used, as an everyday start finds them. Prints the median of
the rounds per checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, time
t = time.perf_counter()
from specchat import cli
cli._register_commands()
imported = time.perf_counter() - t
from specchat.backend.loading import text_vocabs
from specchat.llm.model import load_model
from specchat.models import DEFAULT_TARGET, default_draft_for, resolve_model
from specchat.settings.load import LoadSettings
target_path = resolve_model(DEFAULT_TARGET)
target = load_model(target_path, n_ctx=512)
draft = load_model(resolve_model(default_draft_for(DEFAULT_TARGET)), n_ctx=512)
t = time.perf_counter()
text_vocabs(LoadSettings(draft=None), target, draft)
print(json.dumps({"import": imported, "vocabulary": time.perf_counter() - t}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree]
    seen: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for r in range(args.rounds):
        for tree in trees[r % len(trees):] + trees[:r % len(trees)]:
            out = subprocess.run([sys.executable, "-c", PROBE], check=True, cwd=tree,
                                 env={**os.environ, "PYTHONPATH": str(tree)},
                                 capture_output=True, text=True).stdout
            seen[tree].append(json.loads(out.splitlines()[-1]))
    for tree, runs in seen.items():
        parts = ", ".join(f"{name} {statistics.median(r[name] for r in runs) * 1e3:.1f} ms"
                          for name in ("import", "vocabulary"))
        print(f"{tree}: median of {len(runs)}: {parts}")


if __name__ == "__main__":
    main()
