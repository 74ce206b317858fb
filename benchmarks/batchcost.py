"""What a verify batch of each size costs the target, in plain steps (docs/costs.md).

    python benchmarks/batchcost.py -m qwen2.5-coder-1.5b --depths 48,600,1500 --rounds 3
        [--largest 17] [--typical 20]

For each thread count and context depth: `--rounds` rounds of specchat's own calibration
measurement (the fastest of 3 evals of n tokens, all n logits rows, n = 1..17 unless
--largest says otherwise, e.g. 33 for what drafts longer than the table would cost), and the
median over rounds of each size's cost over a plain step's. `specchat bench --calibrate`
takes one round; this shows how steady the shape is, whether it moves with depth and with
one thread instead of all (what the thread governor switches to under contention).

--typical R: then R more rounds of single evals of every size in turn at the first depth, and
per size the median over those evals over the median plain step, beside the first three
rounds' fastest (what one calibration round keeps): what a batch usually costs against what
calibration prices it at, on a machine where nothing else runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

from specchat.backend.calibration import measure
from specchat.backend.loading import open_runtime
from specchat.engine.options import Spec
from specchat.llm.ggml import default_threads
from specchat.llm.model import LlamaModel
from specchat.settings.load import LoadSettings

SIZES = tuple(range(1, 18))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--depths", default="200")
    ap.add_argument("--threads", default="", help="comma-separated counts (default: all, 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--largest", type=int, default=SIZES[-1], help="the largest batch measured")
    ap.add_argument("--typical", type=int, default=0, help="rounds of single evals per size")
    args = ap.parse_args(argv)
    sizes = tuple(range(1, max(args.largest, 2) + 1))
    settings = LoadSettings(model=args.model, draft="none", spec=Spec.OFF, n_ctx=4096)
    with open_runtime(settings) as rt:
        target = rt.target
        assert isinstance(target, LlamaModel)  # a local model: it has threads to set
        counts = [int(t) for t in args.threads.split(",") if t] or [default_threads(), 1]
        print("threads depth step_ms " + " ".join(f"{n:>5}" for n in sizes))
        for threads in dict.fromkeys(counts):
            target.set_threads(threads)
            for depth in (int(d) for d in args.depths.split(",")):
                rounds = []
                for _ in range(args.rounds):
                    rounds.append(measure(target, sizes, 3, depth=depth))
                    target.truncate(0)
                med = {n: statistics.median(r[n] for r in rounds) for n in sizes}
                print(f"{threads:>7} {depth:>5} {med[1] * 1000:7.1f} "
                      + " ".join(f"{med[n] / med[1]:5.2f}" for n in sizes), flush=True)
        if args.typical:
            target.set_threads(counts[0])
            typical(target, sizes, args.typical, int(args.depths.split(",")[0]))
    return 0


def typical(target: LlamaModel, sizes: tuple[int, ...], rounds: int, depth: int) -> None:
    """The median of `rounds` evals of each size against the fastest of the first three."""
    filler = [(7 + 31 * i) % target.n_vocab for i in range(depth + sizes[-1])]
    target.truncate(0)
    target.eval(filler[:depth], [])
    target.eval(filler[depth:depth + 4], [0, 1, 2, 3])  # warm-up: first calls allocate
    target.truncate(depth)
    seconds: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            start = time.perf_counter()
            target.eval(filler[depth:depth + n], list(range(n)))
            seconds[n].append(time.perf_counter() - start)
            target.truncate(depth)
    step, fastest = statistics.median(seconds[1]), min(seconds[1][:3])
    print(f"typical, {rounds} rounds at depth {depth}: size, median over median step, "
          "fastest of 3 over fastest step")
    for n in sizes:
        print(f"{n:>3} {statistics.median(seconds[n]) / step:5.2f} "
              f"{min(seconds[n][:3]) / fastest:5.2f}")


if __name__ == "__main__":
    sys.exit(main())
