"""Drafting from the drafting store: sessions replayed, priced by a cost table (docs/drafting.md).

`collect` runs the real target once per request of a session file (`--spec off`, greedy, a
fresh context per request, as one `specchat ask` per request would) and keeps the prompt,
the answer, and where the record the store would keep starts (backend/draftstore.py).
`replay` then runs specchat's real engine on every session in order through specchat/bench's
replay harness (a stand-in target that returns the known answer and verifies trees too, a
clock that charges every verify batch of n tokens what the cost table says). After each request
its record goes into an in-memory store, as `ask` would write it; `auto` drafts from it from
the second request on. Speedup = plain decoding's time on that clock over the mode's time,
from each session's second request on. No timing noise: the store drafter times its
lookups on the loop's clock (engine/build.py), so every mode repeats exactly.

    python benchmarks/session_replay.py collect OUT.json [SESSIONS.jsonl] -n 256
    python benchmarks/session_replay.py replay OUT.json [--table cpu|gpu|R1,R2,...] [-n 128]
        [--modes ngram,auto,nohistory,chains,oracle] [--draft-max K]
    python benchmarks/session_replay.py lookups OUT.json[,MORE.json] [-n 128]

Modes: `auto` (with the store; trees where the target verifies them), `chains` (the store,
chains only), `nohistory` (auto as it was: prompt lookup only), `ngram`, `oracle`
(specchat/bench/oracle.py's per-step oracle copying from prompt lookup or the store). `--table
gpu` prices a batch of n at 1 + 0.03 (n - 1) steps; `cpu` is the quiet 2-core table.
`--draft-max 2` is what an exact CPU target allows (llm/exact.py: 3 rows per verify).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import replaycli  # benchmarks/replaycli.py, beside this file

from specchat.bench.oracle import Candidates, oracle_policy
from specchat.bench.recording import Recorded
from specchat.bench.replay import Setup, run_answer
from specchat.bench.standins import PricedClock, Renumbered, TablePrices, TreeStandIn
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks, make_policy
from specchat.engine.cost import CostTable
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.policy import DraftPolicy
from specchat.engine.storedraft import MATCH_BUCKETS, StoreDrafter
from specchat.engine.suffix import Segment, SuffixIndex

ORACLE = "oracle"


def collect(args: argparse.Namespace) -> int:
    from specchat.backend.draftstore import record_start
    from specchat.backend.loading import open_runtime
    from specchat.bench.sessions import load_sessions
    from specchat.settings.load import LoadSettings

    sessions = load_sessions(Path(args.file) if args.file else None)
    out: list[dict[str, Any]] = []
    with open_runtime(LoadSettings(model=args.model, spec=Spec.OFF, n_ctx=args.ctx)) as rt:
        for s in sessions:
            items = []
            for request in s.requests:
                messages = s.messages(request)
                tokens = rt.chat_tokens(messages)
                rt.target.truncate(0)
                *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=args.max_tokens,
                                                              spec=Spec.OFF))
                assert isinstance(fin, Finished)
                items.append({"prompt": tokens, "answer": list(fin.tokens),
                              "cut": record_start(rt.chat_tokens, messages, tokens)})
                print(f"{s.name}: {len(tokens)} + {len(fin.tokens)}", file=sys.stderr)
            out.append({"session": s.name, "category": s.category, "requests": items})
            Path(args.out).write_text(json.dumps(out))
    return 0


def _remap(sessions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Token ids renumbered densely (the stand-in target's rows stay small)."""
    ids = sorted({t for s in sessions for r in s["requests"] for t in r["prompt"] + r["answer"]})
    remap = {t: i for i, t in enumerate(ids)}
    out = [{**s, "requests": [{"prompt": [remap[t] for t in r["prompt"]],
                               "answer": [remap[t] for t in r["answer"]],
                               "cut": r.get("cut", 0)} for r in s["requests"]]}
           for s in sessions]
    return out, len(ids) + 1


def replay_session(session: dict[str, Any], mode: str, price: TablePrices, vocab: int,
                   max_tokens: int, draft_max: int = 16) -> list[dict[str, Any]]:
    """Every request of a session in order, through specchat/bench's replay harness; per
    request what the mode cost on the clock."""
    segments: list[Segment] = []
    learnt: dict[str, Any] = {}
    rows = []
    for request in session["requests"]:
        prompt, answer = request["prompt"], request["answer"][:max_tokens]
        data = Renumbered.dense(prompt, answer, vocab)
        clock = PricedClock()
        target = TreeStandIn(data.answer, len(prompt), data, price, clock, "target",
                             branches=8 if mode == "auto" else 1)
        # One process per request, as a shell loop runs `ask`: costs as calibrated, the
        # acceptance learnt so far carried over (the calibration file keeps it).
        state = AutoState(target_costs=CostTable(list(price.table.seconds), learn=False))
        state.import_acceptance(learnt)
        history = SuffixIndex(list(segments), vocab) if mode in ("auto", "chains") else None
        spec = Spec.NGRAM if mode in ("ngram", ORACLE) else Spec.AUTO
        options = GenerationOptions(max_tokens=len(answer), spec=spec, draft_max=draft_max)
        hooks = Hooks(clock=clock, auto=state, store=history)
        policy: DraftPolicy
        if mode == ORACLE:
            recorded = Recorded(session["session"], session["category"], data.prompt,
                                data.answer, "length", None)
            policy = oracle_policy(Setup(recorded, data, target, None, clock, options),
                                   store_candidates(SuffixIndex(list(segments), vocab)))
        else:
            policy = make_policy(options, target, None, hooks)
        fin = run_answer(target, prompt, options, policy, hooks, answer,
                         f"{session['session']} under {mode}")
        learnt = state.export_acceptance()
        segments.append(Segment.of_records([prompt[request["cut"]:] + request["answer"]]))
        rows.append({"tokens": len(answer), "seconds": fin.stats.decode_seconds,
                     "steps": fin.stats.steps, "sources": fin.stats.to_dict()["sources"]})
    return rows


def store_candidates(index: SuffixIndex) -> Candidates:
    """The continuations the drafting store offers at a context (what the oracle may copy
    besides prompt lookup)."""
    def candidates(context: Sequence[int], depth: int) -> list[list[int]]:
        found = index.lookup(context, max_occurrences=256, depth=depth)
        if found is None:
            return []
        return [[int(t) for t in row if t >= 0] for row in found.following]
    return candidates


def replay(args: argparse.Namespace) -> int:
    price = TablePrices.named(args.table)
    sessions, vocab = _remap(json.loads(Path(args.data).read_text()))
    modes = args.modes.split(",")
    sums: dict[str, dict[str, list[float]]] = {}
    for s in sessions:
        for mode in modes:
            rows = replay_session(s, mode, price, vocab, args.max_tokens, args.draft_max)[1:]
            plain = sum(r["tokens"] for r in rows) * price.batch(1)
            for key in (s["session"], "overall"):
                cell = sums.setdefault(key, {}).setdefault(mode, [0.0, 0.0, 0.0, 0.0])
                cell[0] += plain
                cell[1] += sum(r["seconds"] for r in rows)
                cell[2] += sum(r["tokens"] for r in rows)
                cell[3] += sum(r["steps"] for r in rows)
    print(f"{'session':22}" + "".join(f"{m:>20}" for m in modes))
    for key, cells in sums.items():
        print(f"{key:22}" + "".join(
            f"{c[0] / c[1]:>10.3f}x {c[2] / c[3]:4.2f}t/s" for c in cells.values()))
    return 0


def lookups(args: argparse.Namespace) -> int:
    """How often a candidate the store proposes first is the target's next token, by the
    kind the history drafter calibrates it as (match length bucket x support class), from
    each session's second request on."""
    tally: dict[tuple[int, int], list[int]] = {}
    for data in args.data.split(","):
        sessions, vocab = _remap(json.loads(Path(data).read_text()))
        for s in sessions:
            segments: list[Segment] = []
            for i, r in enumerate(s["requests"]):
                answer = r["answer"][: args.max_tokens]
                drafter = StoreDrafter(SuffixIndex(list(segments), vocab),
                                       AutoState().model, CostTable.from_ratios(1.0, [1.0] * 17))
                context = list(r["prompt"])
                for token in answer if i else ():
                    drafter.propose(context, 16)
                    found = drafter.last_candidates
                    if found is not None:
                        tree, bucket, support = found
                        for c in np.flatnonzero(tree.parent == -1):
                            cell = tally.setdefault((int(bucket[c]), int(support[c])), [0, 0])
                            cell[0] += 1
                            cell[1] += int(tree.tokens[c]) == token
                    context.append(token)
                segments.append(Segment.of_records([r["prompt"][r["cut"]:] + r["answer"]]))
    names = ("contested, 1", "contested, 2+", "sole, 1", "sole, 2", "sole, 3+")
    print("match length  support (occurrences)  candidates  right")
    edges = (2, *MATCH_BUCKETS)
    for (length, kind), (n, right) in sorted(tally.items()):
        low = edges[length]
        span = f"{low}-{edges[length + 1] - 1}" if length + 1 < len(edges) else f"{low}+"
        print(f"{span:12}  {names[kind]:22} {n:10}  {right / n:5.0%}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap, sub = replaycli.parsers(__doc__, collect_tokens=256, modes="nohistory,chains,auto")
    for name in ("replay", "lookups"):
        sub[name].add_argument("-n", "--max-tokens", type=int, default=128)
    return replaycli.run(ap, argv, {"collect": collect, "replay": replay, "lookups": lookups})


if __name__ == "__main__":
    sys.exit(main())
