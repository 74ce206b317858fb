"""The command line that lookup_replay.py and session_replay.py share (not a script).

Both collect real answers once (`collect`), replay them through specchat/bench's harness
(`replay`) and tally how often a lookup holds (`lookups`); each script adds its own flags
to the parsers this returns, and picks its own defaults.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]


def parsers(doc: str | None, *, collect_tokens: int, modes: str
            ) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The whole parser, and its `collect`, `replay` and `lookups` subparsers by name."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    collect = sub.add_parser("collect")
    collect.add_argument("out")
    collect.add_argument("file", nargs="?")
    collect.add_argument("-n", "--max-tokens", type=int, default=collect_tokens)
    collect.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    collect.add_argument("--ctx", type=int, default=4096)
    replay = sub.add_parser("replay")
    replay.add_argument("data")
    replay.add_argument("--table", default="cpu", help="cpu (default), gpu, or batch ratios "
                        "R1,R2,...")
    replay.add_argument("--modes", default=modes)
    replay.add_argument("--draft-max", type=int, default=16)
    lookups = sub.add_parser("lookups")
    lookups.add_argument("data")
    return ap, {"collect": collect, "replay": replay, "lookups": lookups}


def run(ap: argparse.ArgumentParser, argv: Sequence[str] | None,
        commands: dict[str, Command]) -> int:
    """Parse `argv` and run the subcommand it names."""
    args = ap.parse_args(argv)
    return commands[args.cmd](args)
