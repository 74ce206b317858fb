"""What a full drafting store costs: opening it, and one lookup a step (docs/drafting.md).

    python benchmarks/storebench.py fill DIR [--mb 64] [--data sessions.json,...]
    python benchmarks/storebench.py time DIR [--data sessions.json] [--steps 2000]

`fill` writes a store of about --mb megabytes into DIR the way the store grows: records
appended one at a time (merged by size tiers and evicted at the limit as they come), from
the token records of collected sessions (benchmarks/sessions.py collect), each request
varied at random places so that records differ as real ones do. `time` measures, in a
fresh process each time, how long opening the store adds to startup (listing, mapping and
checking every segment; the vocabulary key from 600 token pieces is timed apart), and then
replays the collected answers token by token against the full store with the real drafter
(StoreDrafter.propose: the lookups, the candidate tree, the choice), reporting the time per
step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specchat.backend.draftstore import DraftStore, vocab_key
from specchat.engine.auto import CPU_RATIOS, AutoState
from specchat.engine.cost import CostTable
from specchat.engine.storedraft import StoreDrafter

VOCAB = "benchmark-vocab0"
N_VOCAB = 151936


def _records(paths: str) -> list[list[int]]:
    out = []
    for path in paths.split(","):
        for s in json.loads(Path(path).read_text()):
            for r in s["requests"]:
                out.append(r["prompt"][r.get("cut", 0):] + r["answer"])
    return out


def fill(args: argparse.Namespace) -> int:
    base = _records(args.data)
    rng = np.random.default_rng(0)
    limit = int(args.mb * 1024 * 1024)
    store = DraftStore(Path(args.dir), VOCAB, limit)
    start, n = time.perf_counter(), 0
    while True:
        rec = np.array(base[n % len(base)], dtype=np.uint32)
        flip = rng.random(len(rec)) < 0.05  # values differ from request to request
        rec[flip] = rng.integers(0, N_VOCAB, int(flip.sum()))
        store.append(rec.tolist(), n)
        n += 1
        files, size, records = store.usage()
        if n % 500 == 0:
            print(f"{n} appended: {records} records, {size / 1e6:.1f} MB in {files} files, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
        if size >= limit * 0.85 and n > 2 * records:  # full, and evicting for a while
            break
    print(f"filled: {records} records, {size / 1e6:.1f} MB in {files} files")
    return 0


OPEN = """
import sys, time
from pathlib import Path
t0 = time.perf_counter()
from specchat.backend.draftstore import DraftStore
t1 = time.perf_counter()
store = DraftStore(Path(sys.argv[1]), sys.argv[2], 1 << 40)
index = store.index(151936)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, sum(len(s) for s in index.segments), len(index.segments))
"""


def time_it(args: argparse.Namespace) -> int:
    opens = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", OPEN, args.dir, VOCAB], check=True,
                             capture_output=True, text=True).stdout.split()
        opens.append(float(out[1]))
    print(f"open a store of {int(out[2]):,} tokens in {out[3]} segments: median "
          f"{statistics.median(opens) * 1000:.1f} ms, max {max(opens) * 1000:.1f} ms "
          f"({args.repeats} fresh processes)")
    pieces = [bytes([i % 256]) * (1 + i % 7) for i in range(N_VOCAB)]
    t0 = time.perf_counter()
    vocab_key(N_VOCAB, frozenset({151645}), pieces.__getitem__)
    print(f"vocabulary key: {(time.perf_counter() - t0) * 1000:.2f} ms (in-memory pieces; "
          "llama.cpp's token_to_piece adds about 1 us per piece)")
    store = DraftStore(Path(args.dir), VOCAB, 1 << 40)
    costs = CostTable.from_ratios(0.04, CPU_RATIOS)
    rounds = []
    for _ in range(args.rounds):  # the fastest round is the least disturbed by other work
        walls: list[float] = []
        cpus: list[float] = []
        for prompt, answer in _answers(args.data)[: args.requests]:
            # A fresh index and drafter per answer, as each `ask` process has: nothing it
            # remembers from one lookup to the next carries over between answers.
            drafter = StoreDrafter(store.index(N_VOCAB), AutoState().model, costs, branches=8)
            context = list(prompt)
            for token in answer:
                t, c = time.perf_counter(), time.process_time()
                drafter.propose(context, 16)
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
                context.append(token)
                if len(walls) >= args.steps:
                    break
        rounds.append((statistics.fmean(cpus), walls, cpus))
    _, walls, cpus = min(rounds, key=lambda r: r[0])
    for name, times in (("wall", walls), ("cpu", cpus)):
        times.sort()
        print(f"plan per step, {name} time, fastest of {args.rounds} rounds of {len(times)} "
              f"steps: median {statistics.median(times) * 1e3:.3f} ms, mean "
              f"{statistics.fmean(times) * 1e3:.3f} ms, p95 "
              f"{times[int(len(times) * 0.95)] * 1e3:.3f} ms")
    return 0


def _answers(paths: str) -> list[tuple[list[int], list[int]]]:
    return [(r["prompt"], r["answer"]) for path in paths.split(",")
            for s in json.loads(Path(path).read_text()) for r in s["requests"]]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fill")
    f.add_argument("dir")
    f.add_argument("--mb", type=float, default=64)
    f.add_argument("--data", required=True)
    t = sub.add_parser("time")
    t.add_argument("dir")
    t.add_argument("--data", required=True)
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--requests", type=int, default=100)
    t.add_argument("--repeats", type=int, default=7)
    t.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    return {"fill": fill, "time": time_it}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
