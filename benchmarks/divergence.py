"""Where a greedy answer parts from `--spec off`'s in a sessions bench (docs/exactness.md).

Where a greedy answer parts from `--spec off`'s in a `specchat bench --sessions --json`
run, how close the two tokens were.

    python benchmarks/divergence.py sessions.json [-m qwen2.5-coder-1.5b]

For every request whose answer in another mode (auto, llama-cpp-python) differs from off's,
the first differing position, and both tokens' logits there with off's answer so far as the
context, evaluated in one batch. A gap far below the ~0.5 logit that llama.cpp's batched and
single-token arithmetic differ by (benchmarks/batch_identity.py) is a near-tie, not a bug.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specchat.backend.loading import open_runtime
from specchat.bench.sessions import load_sessions
from specchat.engine.options import Spec
from specchat.engine.protocol import common_prefix
from specchat.settings.load import LoadSettings


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("sessions", nargs="?", type=Path)
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    args = ap.parse_args()
    data: dict[str, Any] = json.loads(args.runs.read_text())
    by: dict[tuple[str, int], dict[str, list[int]]] = {}
    for r in data["runs"]:
        by.setdefault((r["session"], r["index"]), {})[r["mode"]] = r["tokens"]
    sessions = {s.name: s for s in load_sessions(args.sessions)}
    compared = differ = 0
    with open_runtime(LoadSettings(model=args.model, spec=Spec.OFF)) as rt:
        for (name, i), modes in sorted(by.items()):
            off = modes.get("off")
            for mode, tokens in sorted(modes.items()):
                if off is None or mode == "off" or not tokens:
                    continue
                compared += 1
                at = common_prefix(tokens, off)
                if at >= min(len(tokens), len(off)):
                    continue
                differ += 1
                s = sessions[name]
                context = [*rt.chat_tokens(s.messages(s.requests[i])), *off[:at]]
                rt.target.truncate(0)
                row = rt.target.eval(context, [len(context) - 1])[0]
                print(f"{name} {i + 1} {mode}: from token {at}, off's {off[at]} at "
                      f"{row[off[at]]:.3f}, {mode}'s {tokens[at]} at {row[tokens[at]]:.3f}, "
                      f"gap {abs(row[off[at]] - row[tokens[at]]):.3f}", flush=True)
    print(f"{differ} of {compared} answers differ from off's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
