"""What a grammar costs per token, and what it costs free text (docs/structured.md).

What a grammar costs per token, and what free text pays for the grammar code: nothing.

Times, on a real model's vocabulary (Qwen2.5-Coder 1.5B: 151,936 ids), each piece the
engine adds when an answer is constrained, median of many repeats:

- `biased(row)` without a grammar or a bias: the only code free text runs (one test);
- `biased(row, mask)`: a grammar's mask applied to one logits row;
- llguidance's mask of the next position (Matcher.allowed) and taking in one token
  (Matcher.advance), over the tokens of a real JSON answer;

and what one answer's steps cost in the engine with and without the grammar, on the real
target, greedy, `--spec off`, same prompt (decode seconds per token, median of runs).

    python benchmarks/grammar_cost.py [--model PATH] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specchat.backend.structured import with_format_note
from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions, Structure
from specchat.engine.sampling import biased
from specchat.llm import ChatTemplate, chat_tokens
from specchat.llm.grammar import Grammars
from specchat.llm.model import load_model

SCHEMA = {"type": "object", "properties": {
    "people": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string"}, "joined": {"type": "integer"}},
        "required": ["name", "role", "joined"], "additionalProperties": False}}},
    "required": ["people"], "additionalProperties": False}
PROMPT = ("Extract every person with their role and the year they joined: In 2015 Maria Lopez "
          "joined as a data engineer; in 2017 Tom Becker became head of design; in 2019 Aisha "
          "Khan joined as chief financial officer.")


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_per_token(model: object, prompt: list[int], structure: Structure | None,
                     grammars: Grammars, runs: int) -> tuple[float, tuple[int, ...]]:
    per_token = []
    tokens: tuple[int, ...] = ()
    for _ in range(runs):
        constraint = grammars.structure(structure) if structure is not None else None
        *_, fin = generate(model, prompt, GenerationOptions(max_tokens=96, spec="off"),  # type: ignore[arg-type]
                           hooks=Hooks(constraint=constraint))
        assert isinstance(fin, Finished)
        per_token.append(fin.stats.decode_seconds / max(1, fin.stats.generated))
        tokens = fin.tokens
    return statistics.median(per_token), tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=Path.home() / ".cache/specchat/models/"
                    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    model = load_model(args.model, n_ctx=2048)
    grammars = Grammars(model)
    structure = Structure("json_schema", json.dumps(SCHEMA))
    row = np.random.default_rng(0).standard_normal(model.n_vocab).astype(np.float32)
    opts = SamplingOptions()
    out: dict[str, float] = {}
    out["biased_free_text_ns"] = median_seconds(
        lambda: [biased(row, opts) for _ in range(1000)], 50) / 1000 * 1e9
    matcher = grammars.structure(structure)
    mask = matcher.allowed()
    out["mask_apply_us"] = median_seconds(lambda: biased(row, opts, mask), 200) * 1e6

    messages = with_format_note([{"role": "user", "content": PROMPT}], structure)
    prompt = chat_tokens(model, ChatTemplate.from_model(model), messages)
    constrained, answer = decode_per_token(model, prompt, structure, grammars, args.runs)
    free, _ = decode_per_token(model, prompt, None, grammars, args.runs)
    masks, advances = [], []
    fresh = grammars.structure(structure)
    for token in answer[:-1]:
        start = time.perf_counter()
        fresh.allowed()
        masks.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh.advance([token])
        advances.append(time.perf_counter() - start)
    out["llguidance_mask_us"] = statistics.median(masks) * 1e6
    out["llguidance_advance_us"] = statistics.median(advances) * 1e6
    out["decode_ms_per_token_free"] = free * 1e3
    out["decode_ms_per_token_constrained"] = constrained * 1e3
    out["answer_tokens"] = len(answer)
    for name, value in out.items():
        print(f"{name:34} {value:10.3f}")


if __name__ == "__main__":
    main()
