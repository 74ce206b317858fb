"""A foreign process that keeps part of one core busy, in bursts (docs/performance.md).

    python benchmarks/busy_core.py [--busy 0.02] [--idle 0.02] [--seconds 300]

Spins for --busy seconds, sleeps for --idle seconds, over and over, for --seconds in all: the
kind of load another program on the machine puts beside a benchmark (a build, a browser tab),
which llama.cpp's spinning threads and specchat's thread governor meet. Run it in the
background beside the benchmark; it stops on its own.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--busy", type=float, default=0.02)
    ap.add_argument("--idle", type=float, default=0.02)
    ap.add_argument("--seconds", type=float, default=300.0)
    args = ap.parse_args()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        spin_until = time.perf_counter() + args.busy
        while time.perf_counter() < spin_until:
            pass
        time.sleep(args.idle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
