"""Any specchat command with every llama_decode call timed (docs/performance.md).

    python benchmarks/decode_log.py bench -m qwen2.5-coder-1.5b -n 128 --categories qa,writing

Runs the CLI in this process with step_overhead.py's wrapper around llama_cpp.llama_decode,
which specchat and llama-cpp-python (the `vs lcp` baseline of `specchat bench`) both call
through the module. Then prints, per llama.cpp context in the order each was first used, and
per thread count: how many single-token calls it made, their median and mean milliseconds,
what its verify batches (2-17 tokens) cost in median single-token calls, and the time
between two consecutive single-token calls of that context (Python's loop, the sampler,
detokenizing: everything a plain step pays besides llama_decode). Gaps over 50 ms (another
mode's turn, a prefill) are left out.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections import defaultdict
from typing import Any

from step_overhead import Call, DecodeLog  # benchmarks/step_overhead.py, beside this file

from specchat.cli import main as specchat_main
from specchat.engine.cost import MAX_N

LONGEST_GAP = 0.05


def summary(calls: list[Call]) -> list[str]:
    """One line per (context, thread count) with single-token calls, what its batches of
    2-17 tokens (verify batches, not prefills) cost in its median single-token calls, and
    per context its gaps."""
    order: dict[Any, int] = {}
    steps: dict[tuple[int, int], list[float]] = defaultdict(list)
    gaps: dict[int, list[float]] = defaultdict(list)
    for call in calls:
        order.setdefault(call[0], len(order))
    batches: dict[tuple[int, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ctx, n, start, end, _cpu, threads in calls:
        if n == 1:
            steps[(order[ctx], threads)].append(end - start)
        elif n <= MAX_N:
            batches[(order[ctx], threads)][n].append(end - start)
    for a, b in itertools.pairwise(calls):
        if a[0] is b[0] and a[1] == b[1] == 1 and 0 <= b[2] - a[3] < LONGEST_GAP:
            gaps[order[a[0]]].append(b[2] - a[3])
    lines = []
    for (ctx, threads), seconds in sorted(steps.items()):
        lines.append(f"context {ctx}, {threads} threads: {len(seconds)} single-token calls, "
                     f"median {statistics.median(seconds) * 1e3:.2f} ms, "
                     f"mean {statistics.fmean(seconds) * 1e3:.2f} ms")
        if sizes := batches.get((ctx, threads)):
            step = statistics.median(seconds)
            lines.append("  batches, median in steps: " + ", ".join(
                f"{n}: {statistics.median(b) / step:.2f} ({len(b)})"
                for n, b in sorted(sizes.items())))
    for ctx, seconds in sorted(gaps.items()):
        lines.append(f"context {ctx}: between single-token calls median "
                     f"{statistics.median(seconds) * 1e3:.3f} ms, mean "
                     f"{statistics.fmean(seconds) * 1e3:.3f} ms ({len(seconds)} gaps)")
    return lines


def run_logged(argv: list[str]) -> tuple[int, list[Call]]:
    """The CLI run in this process with `argv`: its exit code and every llama_decode call."""
    log = DecodeLog()
    log.install()
    sys.argv = ["specchat", *argv]
    try:
        specchat_main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    else:
        code = 0
    return code, log.calls


def main(argv: list[str]) -> int:
    code, calls = run_logged(argv)
    print("\n".join(summary(calls)), file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
