"""Noise-free A/B of drafting policies: replay the target's own greedy answers.

Greedy speculative decoding is exact, so the answer is known before drafting: the target's
plain greedy answer. `collect` runs the real target once per prompt (`--spec off`) and keeps
the prompt and answer tokens; `replay` then runs specchat's real engine (prompt lookup, auto)
against a stand-in target that returns the known answer's next token, on a fake clock that
charges every verify batch of n tokens what the calibration table says it costs here. Speedup
= the time plain decoding would take on that clock over the time the policy took. No timing
noise, so policies can be compared on a busy machine; only the cost table is machine-specific.

    python benchmarks/replay.py collect OUT.json [FILE] --categories ... --limit N -n 128
    python benchmarks/replay.py replay OUT.json [--ratios 1,1.72,...] [--modes ngram,auto,oracle]
    python benchmarks/replay.py lookups OUT.json   # how often a lookup's first token holds

`oracle` knows the answer: each step it drafts the part of the lookup continuation that will
be accepted, at the length that pays best on the table (the ceiling for prompt lookup).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specchat.bench import prompts as bp
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks, generate
from specchat.engine.cost import CostTable, match_bucket
from specchat.engine.drafters import Draft, NgramIndex, PromptLookupDrafter
from specchat.engine.events import Finished
from specchat.engine.loop import _Run
from specchat.engine.options import GenerationOptions
from specchat.engine.policy import Step

# Qwen2.5-Coder-1.5B Q4_K_M on a quiet 2-core VM (AMD EPYC, AVX2), 2 threads, every batch
# size measured (python benchmarks/batchcost.py --depths 200 --rounds 3; docs/costs.md).
QUIET_RATIOS = "1,1.73,2.33,2.77,3.27,3.98,4.58,6.19,6.54,6.90,7.40,8.47,8.55,9.03,9.22,7.76,10.27"


def collect(args: argparse.Namespace) -> int:
    from specchat.backend.loading import open_runtime
    from specchat.settings.load import LoadSettings

    chosen = bp.select(bp.load_prompts(Path(args.file) if args.file else None),
                       bp.parse_categories(args.categories), args.limit)
    out: list[dict[str, Any]] = []
    with open_runtime(LoadSettings(model=args.model, spec="off", n_ctx=args.ctx)) as rt:
        for p in chosen:
            tokens = rt.chat_tokens([{"role": "user", "content": p.text}])
            if len(tokens) + args.max_tokens > rt.target.n_ctx:
                continue
            rt.target.truncate(0)
            *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=args.max_tokens,
                                                          spec="off"))
            assert isinstance(fin, Finished)
            out.append({"question_id": p.question_id, "category": p.category,
                        "prompt": tokens, "answer": list(fin.tokens)})
            print(f"{p.category} {p.question_id}: {len(tokens)} + {len(fin.tokens)}",
                  file=sys.stderr)
            Path(args.out).write_text(json.dumps(out))
    return 0


class ReplayTarget:
    """A LogitsModel whose greedy choice after prompt + answer[:i] is answer[i]."""

    def __init__(self, prompt: Sequence[int], answer: Sequence[int], vocab: int,
                 table: CostTable, now: list[float]) -> None:
        self.full = [*prompt, *answer]
        self.n_prompt = len(prompt)
        self.vocab, self.table, self.now = vocab, table, now
        self._tokens: list[int] = []
        self.eog_tokens: frozenset[int] = frozenset({vocab - 1})

    n_ctx = 1 << 20

    @property
    def n_vocab(self) -> int:
        return self.vocab

    @property
    def tokens(self) -> Sequence[int]:
        return tuple(self._tokens)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        start = len(self._tokens)
        self._tokens.extend(tokens)
        if logit_rows and logit_rows != [-1]:
            self.now[0] += self.table.cost(len(tokens))  # a verify batch
        rows = [len(tokens) - 1 if r == -1 else r for r in logit_rows]
        out = np.zeros((len(rows), self.vocab), dtype=np.float32)
        for k, r in enumerate(rows):
            pos = start + r + 1  # the token that should follow position start + r
            nxt = self.full[pos] if pos < len(self.full) else self.vocab - 1
            out[k, nxt] = 10.0
        return out

    def truncate(self, n: int) -> None:
        del self._tokens[max(n, 0):]

    def token_bytes(self, token: int) -> bytes:
        return b"x"


class OracleLookup:
    """Prompt lookup that knows the answer (a DraftPolicy): drafts only what will be accepted,
    and only as much as pays best on the cost table (possibly a longer, cheaper batch)."""

    def __init__(self, answer: Sequence[int], n_prompt: int, table: CostTable) -> None:
        self.lookup = PromptLookupDrafter(2, 5)
        self.answer, self.n_prompt, self.table = answer, n_prompt, table

    def prepare(self, context: Sequence[int]) -> None:
        self.lookup.prepare(context)

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        avail = self.lookup.propose(context, k, rng).tokens
        truth = self.answer[len(context) - self.n_prompt:]
        right = next((i for i, (a, t) in enumerate(zip(avail, truth, strict=False)) if a != t),
                     min(len(avail), len(truth)))
        best = max(range(len(avail) + 1),
                   key=lambda n: (min(n, right) + 1) / self.table.cost(n + 1))
        return Draft(tuple(avail[:best]), None)

    def observe(self, step: Step) -> None:
        return None

    def committed(self, context: Sequence[int]) -> None:
        return None

    def reset(self, context: Sequence[int]) -> None:
        return None


def replay_one(item: dict[str, Any], spec: str, table: CostTable, state: AutoState | None,
               draft_max: int) -> tuple[int, float, int]:
    ids = sorted(set(item["prompt"]) | set(item["answer"]))
    remap = {t: i for i, t in enumerate(ids)}
    prompt = [remap[t] for t in item["prompt"]]
    answer = [remap[t] for t in item["answer"]]
    now = [0.0]
    target = ReplayTarget(prompt, answer, len(ids) + 1, table, now)
    options = GenerationOptions(max_tokens=len(answer), spec="ngram" if spec == "oracle"
                                else spec, draft_max=draft_max)
    if spec == "oracle":
        run = _Run(target, list(prompt), options, OracleLookup(answer, len(prompt), table),
                   Hooks(clock=lambda: now[0]))
        *_, fin = run.events()
    else:
        *_, fin = generate(target, prompt, options, hooks=Hooks(clock=lambda: now[0], auto=state))
    assert isinstance(fin, Finished) and list(fin.tokens) == answer, "replay is not exact"
    return len(answer), fin.stats.decode_seconds, fin.stats.steps


def replay(args: argparse.Namespace) -> int:
    ratios = [float(r) for r in (args.ratios or QUIET_RATIOS).split(",")]
    table = CostTable.from_ratios(1.0, ratios)
    by_cat: dict[str, dict[str, list[float]]] = {}
    items = [i for f in args.data.split(",") for i in json.loads(Path(f).read_text())]
    for spec in args.modes.split(","):
        state = AutoState(target_costs=CostTable(list(table.seconds))) if spec == "auto" else None
        for item in items:
            if args.fresh and state is not None:  # one process per prompt, like `ask`
                state = AutoState(target_costs=CostTable(list(table.seconds)))
            n, seconds, _ = replay_one(item, spec, table, state, args.draft_max)
            plain = n * table.cost(1)
            for key in (item["category"], "overall"):
                sums = by_cat.setdefault(key, {}).setdefault(spec, [0.0, 0.0])
                sums[0] += plain
                sums[1] += seconds
    for cat, modes in by_cat.items():
        cells = "  ".join(f"{m} {p / s:.3f}x" for m, (p, s) in modes.items())
        print(f"{cat:16} {cells}")
    return 0


def lookups(args: argparse.Namespace) -> int:
    """At every answer position with a lookup match: does the first proposed token hold, by
    match length and by whether the n-gram was seen with different continuations before."""
    tally: dict[tuple[int, bool], list[int]] = {}
    for item in (i for f in args.data.split(",") for i in json.loads(Path(f).read_text())):
        index = NgramIndex(2, 5)
        index.extend(item["prompt"])
        for token in item["answer"]:
            n, start = index.match()
            if n:
                length = n
                toks = index.tokens
                while start - length - 1 >= 0 and toks[start - length - 1] == toks[-length - 1]:
                    length += 1
                cell = tally.setdefault((match_bucket(length), index.ambiguous(n)), [0, 0])
                cell[0] += 1
                cell[1] += toks[start] == token
            index.append(token)
    print("match bucket  n-gram      lookups  first token right")
    for (bucket, ambiguous), (count, right) in sorted(tally.items()):
        kind = "ambiguous" if ambiguous else "one-way"
        print(f"{bucket:12}  {kind:10} {count:8}  {right / count:6.0%}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out")
    c.add_argument("file", nargs="?")
    c.add_argument("--categories")
    c.add_argument("--limit", type=int)
    c.add_argument("-n", "--max-tokens", type=int, default=128)
    c.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    c.add_argument("--ctx", type=int, default=4096)
    r = sub.add_parser("replay")
    r.add_argument("data")
    r.add_argument("--ratios")
    r.add_argument("--modes", default="ngram,auto")
    r.add_argument("--draft-max", type=int, default=16)
    r.add_argument("--fresh", action="store_true", help="a new auto state per prompt (as "
                   "one `ask` per prompt) instead of one kept across prompts (chat, bench)")
    lk = sub.add_parser("lookups")
    lk.add_argument("data")
    args = ap.parse_args(argv)
    return {"collect": collect, "replay": replay, "lookups": lookups}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
