"""What a step costs by mode, each answer a fresh `specchat ask` process (docs/performance.md).

    python benchmarks/fresh_steps.py [-m qwen2.5-coder-1.5b] [-d qwen2.5-coder-0.5b]
        [--modes off,auto] [--rounds 10] [-n 64] [--prompt TEXT]
        [--session NAME --request I] [--profile cpu-2core-qwen1.5b]

`bench --sessions` runs every request in a process of its own, so whatever differs from one
process to the next lands in its pairs. By default this runs one prompt that nothing in it
drafts from (each process gets an empty drafting store of its own, so `auto` can only take
plain steps or ask the draft model); with --session, request I (0-based) of a built-in
session, each process on a copy of a store that holds the session's earlier requests
(answered once, under `auto`, before the rounds). The modes take turns each round, and
every llama_decode call in each process is timed (step_overhead.py's wrapper). Per process:
the median one-token call of the target (the context with the most calls), the median time
between two such calls, and the time of every batch. Then per mode: the mean and range of
those medians over processes, and each mode's step over the first mode's, paired by round,
with a bootstrap interval (specchat/bench/interval.py); and the mean cost of each batch size
over the first mode's mean one-token call, beside what --profile's table prices it at (the
table the replays price steps on).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decode_log import run_logged  # benchmarks/decode_log.py, beside this file
from step_overhead import Call  # benchmarks/step_overhead.py

from specchat.bench.interval import paired_ratio
from specchat.bench.profiles import load
from specchat.bench.sessions import load_sessions

PROMPT = "Explain in three sentences why the sky is blue."
LONGEST_GAP = 0.05  # longer gaps are a prefill or the end, not a step


def target_steps(calls: list[Call]) -> dict[str, Any]:
    """The target's median one-token call, the median gap between two of them, and every
    call after the prefill by its size: seconds."""
    counts: dict[int, int] = defaultdict(int)
    for call in calls:
        counts[id(call[0])] += 1
    target = max(counts, key=counts.__getitem__)
    ours = [c for c in calls if id(c[0]) == target]
    steps = [end - start for _, n, start, end, _, _ in ours if n == 1]
    gaps = [b[2] - a[3] for a, b in itertools.pairwise(ours) if a[1] == b[1] == 1
            and 0 <= b[2] - a[3] < LONGEST_GAP]
    sizes: dict[int, list[float]] = defaultdict(list)
    for _, n, start, end, _, _ in ours[1:]:
        sizes[n].append(end - start)
    return {"step": statistics.median(steps), "gap": statistics.median(gaps) if gaps else 0.0,
            "sizes": sizes}


def child(out: str, argv: list[str]) -> int:
    """Run the CLI in this process with every llama_decode timed; write target_steps."""
    code, calls = run_logged(argv)
    if code == 0:
        Path(out).write_text(json.dumps(target_steps(calls)))
    return code


def ask_flags(args: argparse.Namespace, prompt: str, system: str | None) -> list[str]:
    """`specchat ask`'s flags after --spec, as `bench --sessions` passes them
    (session_runner._ask_request)."""
    return ["-n", str(args.n), "--temperature", "0", "--prompt-cache", "0", "-m", args.model,
            "-d", args.draft, *(["--system", system] if system else []), "--", prompt]


def session_prompt(args: argparse.Namespace, work: Path) -> tuple[list[str], Path]:
    """ask_flags for the prompt to time, and a store holding what comes before it (empty
    without --session)."""
    store = work / "store"
    store.mkdir()
    if not args.session:
        return ask_flags(args, args.prompt, None), store
    session = {s.name: s for s in load_sessions(None)}[args.session]
    env = {**os.environ, "SPECCHAT_DRAFT_STORE_DIR": str(store), "NO_COLOR": "1"}
    for earlier in session.requests[: args.request]:
        subprocess.run(["specchat", "ask", "--spec", "auto",
                        *ask_flags(args, earlier, session.system)],
                       check=True, stdout=subprocess.DEVNULL, env=env)
    return ask_flags(args, session.requests[args.request], session.system), store


def one(mode: str, work: Path, flags: list[str], store: Path) -> dict[str, Any]:
    copy = Path(tempfile.mkdtemp(dir=work)) / "store"  # each process fills its own
    shutil.copytree(store, copy)
    out = work / "steps.json"
    env = {"SPECCHAT_DRAFT_STORE_DIR": str(copy), "NO_COLOR": "1"}
    subprocess.run([sys.executable, __file__, "--child", str(out), "ask", "--spec", mode, *flags],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, **env})
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def batch_costs(found: list[dict[str, Any]], step: float, ratios: Sequence[float]) -> None:
    """Each batch size's mean cost over `step`, beside the table's price."""
    sizes: dict[int, list[float]] = defaultdict(list)
    for f in found:
        for n, seconds in f["sizes"].items():
            sizes[int(n)].extend(seconds)
    for n in sorted(k for k in sizes if k > 1):
        table = ratios[min(n, len(ratios)) - 1]
        cost = statistics.fmean(sizes[n]) / step
        print(f"  batch of {n}: {len(sizes[n])} calls, {cost:.2f} steps (table {table:.2f}, "
              f"{cost / table:.2f}x)")


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--child"]:
        return child(args_in[1], args_in[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-d", "--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--modes", default="off,auto")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--session", default="")
    ap.add_argument("--request", type=int, default=1)
    ap.add_argument("--profile", default="cpu-2core-qwen1.5b")
    args = ap.parse_args(args_in)
    modes = args.modes.split(",")
    found: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        flags, store = session_prompt(args, Path(tmp))
        for r in range(args.rounds):
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                got = one(mode, Path(tmp), flags, store)
                found[mode].append(got)
                print(f"round {r + 1} {mode}: step {got['step'] * 1e3:.2f} ms, "
                      f"gap {got['gap'] * 1e3:.3f} ms", file=sys.stderr)
    base = [(1.0, f["step"]) for f in found[modes[0]]]
    first = statistics.fmean(t for f in found[modes[0]] for t in f["sizes"].get("1", []))
    ratios = load(args.profile).target.batch_ratios
    for mode in modes:
        steps = [f["step"] * 1e3 for f in found[mode]]
        gaps = [f["gap"] * 1e3 for f in found[mode]]
        # A ratio of speeds (steps per second), paired by round: below 1 = slower steps.
        speed = paired_ratio([(1.0, f["step"]) for f in found[mode]], base)
        told = "-" if speed is None else f"{speed.ratio:.3f}x ({speed.text()})"
        print(f"{mode}: step mean {statistics.fmean(steps):.2f} ms "
              f"(processes {min(steps):.2f}-{max(steps):.2f}), gap mean "
              f"{statistics.fmean(gaps):.3f} ms; speed over {modes[0]} {told}")
        batch_costs(found[mode], first, ratios)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
