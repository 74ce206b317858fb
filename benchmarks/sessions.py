"""Noise-free A/B of drafting from earlier answers: sessions replayed on a priced clock.

`collect` runs the real target once per request of a session file (`--spec off`, greedy, a
fresh context per request, as one `specchat ask` per request would) and keeps the prompt,
the answer, and where the record the store would keep starts (backend/history.py). `replay`
then runs specchat's real engine on every session in order, against a stand-in target that
returns the known answer (benchmarks/replay.py) and verifies trees too, on a fake clock
that charges every verify batch of n tokens what the cost table says. After each request
its record goes into an in-memory store, as `ask` would write it; `auto` drafts from it from
the second request on. Speedup = plain decoding's time on that clock over the mode's time,
from each session's second request on. No timing noise: only the cost table is a machine's.

    python benchmarks/sessions.py collect OUT.json [SESSIONS.jsonl] -n 256
    python benchmarks/sessions.py replay OUT.json [--table cpu|gpu|R1,R2,...] [-n 128]
        [--modes ngram,auto,nohistory,chains] [--draft-max K]

Modes: `auto` (with the store; trees where the target verifies them), `chains` (the store,
chains only), `nohistory` (auto as it was: prompt lookup only), `ngram`. `--table gpu`
prices a batch of n at 1 + 0.03 (n - 1) steps; `cpu` is replay.py's quiet 2-core table.
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

from benchmarks.replay import QUIET_RATIOS, ReplayTarget
from specchat.engine.auto import AutoState
from specchat.engine.build import Hooks, generate
from specchat.engine.cost import CostTable
from specchat.engine.drafters import Draft, PromptLookupDrafter
from specchat.engine.events import Finished
from specchat.engine.loop import _Run
from specchat.engine.options import GenerationOptions
from specchat.engine.policy import Step
from specchat.engine.protocol import common_prefix
from specchat.engine.storedraft import MATCH_BUCKETS, StoreDrafter
from specchat.engine.suffix import Segment, SuffixIndex

GPU_RATIOS = ",".join(f"{1 + 0.03 * i:.2f}" for i in range(65))


def collect(args: argparse.Namespace) -> int:
    from specchat.backend.draftstore import record_start
    from specchat.backend.loading import open_runtime
    from specchat.bench.sessions import load_sessions
    from specchat.settings.load import LoadSettings

    sessions = load_sessions(Path(args.file) if args.file else None)
    out: list[dict[str, Any]] = []
    with open_runtime(LoadSettings(model=args.model, spec="off", n_ctx=args.ctx)) as rt:
        for s in sessions:
            items = []
            for request in s.requests:
                messages = s.messages(request)
                tokens = rt.chat_tokens(messages)
                rt.target.truncate(0)
                *_, fin = rt.stream(tokens, GenerationOptions(max_tokens=args.max_tokens,
                                                              spec="off"))
                assert isinstance(fin, Finished)
                items.append({"prompt": tokens, "answer": list(fin.tokens),
                              "cut": record_start(rt.chat_tokens, messages, tokens)})
                print(f"{s.name}: {len(tokens)} + {len(fin.tokens)}", file=sys.stderr)
            out.append({"session": s.name, "category": s.category, "requests": items})
            Path(args.out).write_text(json.dumps(out))
    return 0


class TreeReplayTarget(ReplayTarget):
    """ReplayTarget that verifies trees: a row's choice is the answer's next token when the
    path to it is the answer so far, else the end-of-generation token (never accepted:
    acceptance only walks down rows whose path the target itself chose)."""

    def __init__(self, *args: Any, branches: int = 8, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_branches = branches
        self._pending: tuple[list[int], list[int]] | None = None

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        start = len(self._tokens)
        self.now[0] += self.table.cost(len(tokens))
        out = np.zeros((len(tokens), self.vocab), dtype=np.float32)
        paths: list[list[int]] = []
        for i, tok in enumerate(tokens):
            path = [*paths[parents[i]], tok] if i else [tok]
            paths.append(path)
            right = self.full[start: start + len(path)] == path
            pos = start + len(path)
            out[i, self.full[pos] if right and pos < len(self.full) else self.vocab - 1] = 10
        self._tokens.append(int(tokens[0]))
        self._pending = (list(tokens), list(parents))
        return out

    def keep_path(self, rows: Sequence[int]) -> None:
        assert self._pending is not None
        self._tokens.extend(self._pending[0][r] for r in rows)
        self._pending = None

    def truncate(self, n: int) -> None:
        self._pending = None
        super().truncate(n)


class Oracle:
    """Knows the answer (a DraftPolicy): each step drafts the longest right continuation
    among what prompt lookup and the store's occurrences offer, at the length that pays
    best on the table. The ceiling of copying from the context and the store."""

    def __init__(self, answer: Sequence[int], n_prompt: int, table: CostTable,
                 index: SuffixIndex | None) -> None:
        self.lookup = PromptLookupDrafter(2, 5)
        self.answer, self.n_prompt, self.table, self.index = answer, n_prompt, table, index

    def prepare(self, context: Sequence[int]) -> None:
        self.lookup.prepare(context)

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> Draft:
        truth = list(self.answer[len(context) - self.n_prompt:][:k])
        options = [list(self.lookup.propose(context, k, rng).tokens)]
        found = self.index.lookup(context, max_occurrences=256, depth=k) if self.index else None
        if found is not None:
            options += [[int(t) for t in row if t >= 0] for row in found.following]
        best: list[int] = []
        for option in options:
            right = common_prefix(option, truth)
            if right > len(best):
                best = option[:right]
        n = max(range(len(best) + 1), key=lambda i: (i + 1) / self.table.cost(i + 1))
        return Draft(tuple(best[:n]), None, "oracle")

    def observe(self, step: Step) -> None:
        return None

    def committed(self, context: Sequence[int]) -> None:
        return None

    def reset(self, context: Sequence[int]) -> None:
        return None


def _remap(sessions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Token ids renumbered densely (the stand-in target's rows stay small)."""
    ids = sorted({t for s in sessions for r in s["requests"] for t in r["prompt"] + r["answer"]})
    remap = {t: i for i, t in enumerate(ids)}
    out = [{**s, "requests": [{"prompt": [remap[t] for t in r["prompt"]],
                               "answer": [remap[t] for t in r["answer"]],
                               "cut": r.get("cut", 0)} for r in s["requests"]]}
           for s in sessions]
    return out, len(ids) + 1


def replay_session(session: dict[str, Any], mode: str, table: CostTable, vocab: int,
                   max_tokens: int, draft_max: int = 16) -> list[dict[str, Any]]:
    """Every request of a session in order; per request what the mode cost on the clock."""
    segments: list[Segment] = []
    learnt: dict[str, Any] = {}
    rows = []
    for request in session["requests"]:
        prompt, answer = request["prompt"], request["answer"][:max_tokens]
        now = [0.0]
        branches = 8 if mode == "auto" else 1
        target = TreeReplayTarget(prompt, answer, vocab, table, now, branches=branches)
        # One process per request, as a shell loop runs `ask`: costs as calibrated, the
        # acceptance learnt so far carried over (the calibration file keeps it).
        state = AutoState(target_costs=CostTable(list(table.seconds), learn=False))
        state.import_acceptance(learnt)
        history = SuffixIndex(list(segments), vocab) if mode in ("auto", "chains") else None
        spec = "ngram" if mode == "ngram" else "auto"
        options = GenerationOptions(max_tokens=len(answer), spec=spec, draft_max=draft_max)
        hooks = Hooks(clock=lambda now=now: now[0], auto=state, store=history)
        if mode == "oracle":
            oracle = Oracle(answer, len(prompt), table, SuffixIndex(list(segments), vocab))
            events = _Run(target, list(prompt), options, oracle, hooks).events()
        else:
            events = generate(target, prompt, options, hooks=hooks)
        *_, fin = events
        assert isinstance(fin, Finished) and list(fin.tokens) == answer, "not exact"
        learnt = state.export_acceptance()
        segments.append(Segment.of_records([prompt[request["cut"]:] + request["answer"]]))
        rows.append({"tokens": len(answer), "seconds": fin.stats.decode_seconds,
                     "steps": fin.stats.steps, "sources": fin.stats.to_dict()["sources"]})
    return rows


def replay(args: argparse.Namespace) -> int:
    ratios = {"cpu": QUIET_RATIOS, "gpu": GPU_RATIOS}.get(args.table, args.table)
    table = CostTable.from_ratios(1.0, [float(r) for r in ratios.split(",")])
    sessions, vocab = _remap(json.loads(Path(args.data).read_text()))
    modes = args.modes.split(",")
    sums: dict[str, dict[str, list[float]]] = {}
    for s in sessions:
        for mode in modes:
            rows = replay_session(s, mode, table, vocab, args.max_tokens, args.draft_max)[1:]
            plain = sum(r["tokens"] for r in rows) * table.cost(1)
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
    for (bucket, support), (n, right) in sorted(tally.items()):
        edges = (2, *MATCH_BUCKETS, None)
        span = f"{edges[bucket]}-{edges[bucket + 1] - 1}" if edges[bucket + 1] else \
            f"{edges[bucket]}+"
        print(f"{span:12}  {names[support]:22} {n:10}  {right / n:5.0%}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out")
    c.add_argument("file", nargs="?")
    c.add_argument("-n", "--max-tokens", type=int, default=256)
    c.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    c.add_argument("--ctx", type=int, default=4096)
    r = sub.add_parser("replay")
    r.add_argument("data")
    r.add_argument("--table", default="cpu")
    r.add_argument("-n", "--max-tokens", type=int, default=128)
    r.add_argument("--modes", default="nohistory,chains,auto")
    r.add_argument("--draft-max", type=int, default=16)
    lk = sub.add_parser("lookups")
    lk.add_argument("data")
    lk.add_argument("-n", "--max-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    return {"collect": collect, "replay": replay, "lookups": lookups}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
