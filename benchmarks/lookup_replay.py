"""Prompt lookup and `auto` replayed on recorded answers, priced by a cost table (docs/drafting.md).

Greedy speculative decoding is exact, so the answer is known before drafting: the target's
plain greedy answer. `collect` runs the real target once per prompt (`--spec off`) and keeps
the prompt and answer tokens; `replay` then runs specchat's real engine (prompt lookup, auto)
through specchat/bench's replay harness: stand-in target, priced clock, the engine's own loop.
The clock charges every verify batch of n tokens what the cost table says (`--table`).
Speedup = the time plain decoding would take on that clock over the time the policy took. No
timing noise, so policies can be compared on a busy machine; only the table is a machine's.

    python benchmarks/lookup_replay.py collect OUT.json [FILE] --categories ... --limit N -n 128
    python benchmarks/lookup_replay.py replay OUT.json[,MORE.json] [--table cpu|gpu|R1,R2,...]
        [--modes ngram,auto,oracle] [--fresh]
    python benchmarks/lookup_replay.py replay builtin   # a `specchat bench` recording
    python benchmarks/lookup_replay.py lookups OUT.json   # how often a lookup's first token holds

`oracle` is specchat/bench/oracle.py's per-step oracle on prompt lookup alone: it knows the
answer and picks the fastest sequence of plain and lookup steps on the table (the ceiling for
prompt lookup).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import replaycli  # benchmarks/replaycli.py, beside this file

from specchat.bench import prompts as bp
from specchat.bench.oracle import oracle_policy
from specchat.bench.recording import Recorded
from specchat.bench.replay import Setup, run_answer
from specchat.bench.standins import PricedClock, Renumbered, StandIn, TablePrices
from specchat.commands.benchreplay import BUILTIN_RECORDINGS, load_recording
from specchat.engine.auto import AutoState
from specchat.engine.autokeys import match_bucket
from specchat.engine.build import Hooks, make_policy
from specchat.engine.contextindex import ContextIndex
from specchat.engine.cost import CostTable
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import DraftPolicy

ORACLE = "oracle"


def collect(args: argparse.Namespace) -> int:
    from specchat.backend.loading import open_runtime
    from specchat.settings.load import LoadSettings

    chosen = bp.select(bp.load_prompts(Path(args.file) if args.file else None),
                       bp.parse_categories(args.categories), args.limit)
    out: list[dict[str, Any]] = []
    with open_runtime(LoadSettings(model=args.model, spec=Spec.OFF, n_ctx=args.ctx)) as rt:
        for p in chosen:
            tokens = rt.chat_tokens([{"role": "user", "content": p.text}])
            if len(tokens) + args.max_tokens > rt.target.n_ctx:
                continue
            rt.target.truncate(0)
            *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=args.max_tokens,
                                                          spec=Spec.OFF))
            assert isinstance(fin, Finished)
            out.append({"question_id": p.question_id, "category": p.category,
                        "prompt": tokens, "answer": list(fin.tokens)})
            print(f"{p.category} {p.question_id}: {len(tokens)} + {len(fin.tokens)}",
                  file=sys.stderr)
            Path(args.out).write_text(json.dumps(out))
    return 0


def replay_one(item: dict[str, Any], spec: str, price: TablePrices, state: AutoState | None,
               draft_max: int) -> tuple[int, float, int]:
    """One collected answer under `spec` (or the oracle) through the engine's loop on stand-ins
    (specchat/bench/replay.py): tokens, seconds on the priced clock, steps."""
    ids = sorted(set(item["prompt"]) | set(item["answer"]))
    remap = {t: i for i, t in enumerate(ids)}
    data = Renumbered.dense([remap[t] for t in item["prompt"]],
                            [remap[t] for t in item["answer"]], len(ids) + 1)
    clock = PricedClock()
    target = StandIn(data.answer, len(data.prompt), data, price, clock, "target")
    options = GenerationOptions(max_tokens=len(data.answer), draft_max=draft_max,
                                spec=Spec.NGRAM if spec == ORACLE else Spec(spec))
    hooks = Hooks(clock=clock, auto=state)
    if spec == ORACLE:
        recorded = Recorded(item["question_id"], item["category"], data.prompt, data.answer,
                            "length", None)
        policy: DraftPolicy = oracle_policy(Setup(recorded, data, target, None, clock, options))
    else:
        policy = make_policy(options, target, None, hooks)
    fin = run_answer(target, data.prompt, options, policy, hooks,
                     data.answer, f"{item['question_id']} under {spec}")
    return len(data.answer), fin.stats.decode_seconds, fin.stats.steps


def load_items(names: str) -> list[dict[str, Any]]:
    """Collected answers from comma-separated `collect` files, or from `specchat bench`'s
    recordings (a recording file, or a built-in one's name: builtin, spec-bench)."""
    items: list[dict[str, Any]] = []
    for name in names.split(","):
        if name in BUILTIN_RECORDINGS or not name.endswith(".json") or \
                isinstance(json.loads(Path(name).read_text()), dict):
            items += [{"question_id": r.question_id, "category": r.category,
                       "prompt": list(r.prompt), "answer": list(r.answer)}
                      for r in load_recording(name).items]
        else:
            items += json.loads(Path(name).read_text())
    return items


def replay(args: argparse.Namespace) -> int:
    price = TablePrices.named(args.table)
    table = price.table
    by_cat: dict[str, dict[str, list[float]]] = {}
    items = load_items(args.data)
    for spec in args.modes.split(","):
        state = AutoState(target_costs=CostTable(list(table.seconds))) if spec == "auto" else None
        for item in items:
            if args.fresh and state is not None:  # one process per prompt, like `ask`
                state = AutoState(target_costs=CostTable(list(table.seconds)))
            n, seconds, _ = replay_one(item, spec, price, state, args.draft_max)
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
    for item in load_items(args.data):
        index = ContextIndex(2, 5)
        context = list(item["prompt"])
        index.sync(context)
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
            context.append(token)
            index.sync(context)
    print("match bucket  n-gram      lookups  first token right")
    for (bucket, ambiguous), (count, right) in sorted(tally.items()):
        kind = "ambiguous" if ambiguous else "one-way"
        print(f"{bucket:12}  {kind:10} {count:8}  {right / count:6.0%}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap, sub = replaycli.parsers(__doc__, collect_tokens=128, modes="ngram,auto")
    sub["collect"].add_argument("--categories")
    sub["collect"].add_argument("--limit", type=int)
    sub["replay"].add_argument("--fresh", action="store_true", help="a new auto state per "
                               "prompt (as one `ask` per prompt) instead of one kept across "
                               "prompts (chat, bench)")
    return replaycli.run(ap, argv, {"collect": collect, "replay": replay, "lookups": lookups})


if __name__ == "__main__":
    sys.exit(main())
