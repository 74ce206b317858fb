"""Where a greedy answer parts from `--spec off`'s in a bench run (docs/exactness.md).

Where a greedy answer parts from `--spec off`'s in a `specchat bench --json` run (of sessions
or of prompts), how close the two tokens were.

    python benchmarks/divergence.py sessions.json [SESSIONS.jsonl] [-m qwen2.5-coder-1.5b]
    python benchmarks/divergence.py prompts.json PROMPTS.jsonl [-m qwen2.5-coder-1.5b]

The second argument is the file the bench ran (the built-in sessions when left out). For
every answer in another mode (auto, llama-cpp-python) that differs from off's, the first
differing position, and both tokens' logits there with off's answer so far as the context,
evaluated in one batch. A gap far below the ~0.5 logit that llama.cpp's batched and
single-token arithmetic differ by (benchmarks/batch_identity.py) is a near-tie, not a bug.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.backend.loading import open_runtime
from specchat.backend.local import Runtime
from specchat.bench.prompts import load_prompts
from specchat.bench.runner import for_prompt
from specchat.bench.sessions import load_sessions
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.protocol import common_prefix
from specchat.settings.load import LoadSettings

Key = tuple[str, int]  # (session, request) or (question, round)


def answers(data: dict[str, Any]) -> dict[Key, dict[str, list[int]]]:
    """Every mode's greedy answer, by request of a sessions run or prompt and round."""
    by: dict[Key, dict[str, list[int]]] = {}
    for r in data.get("runs") or data["records"]:  # sessions' JSON, prompts'
        key = (r["session"], r["index"]) if "session" in r else (r["question_id"], r["round"])
        by.setdefault(key, {})[r["mode"]] = r["tokens"]
    return by


def contexts(rt: Runtime, by_sessions: bool, source: Path | None) -> Callable[[Key], list[int]]:
    """The prompt tokens an answer followed, as the bench built them."""
    if by_sessions:
        asked = {(s.name, i): rt.chat_tokens(s.messages(request))
                 for s in load_sessions(source) for i, request in enumerate(s.requests)}
        return lambda key: asked[key]
    prompts = {p.question_id: rt.chat_prompt([{"role": "user", "content": p.text}],
                                             for_prompt(p, GenerationOptions()))
               for p in load_prompts(source)}
    return lambda key: prompts[key[0]]  # every round asked the same


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("source", nargs="?", type=Path)
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    args = ap.parse_args()
    data: dict[str, Any] = json.loads(args.runs.read_text())
    by = answers(data)
    compared = differ = 0
    with open_runtime(LoadSettings(model=args.model, spec=Spec.OFF)) as rt:
        prompt_of = contexts(rt, "runs" in data, args.source)
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
                context = [*prompt_of((name, i)), *off[:at]]
                rt.target.truncate(0)
                row = rt.target.eval(context, [len(context) - 1])[0]
                print(f"{name} {i + 1} {mode}: from token {at}, off's {off[at]} at "
                      f"{row[off[at]]:.3f}, {mode}'s {tokens[at]} at {row[tokens[at]]:.3f}, "
                      f"gap {abs(row[off[at]] - row[tokens[at]]):.3f}", flush=True)
    print(f"{differ} of {compared} answers differ from off's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
