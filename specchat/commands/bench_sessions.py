"""`specchat bench --sessions [FILE]`: related requests in order, each as a fresh one-shot
process (`--via ask`, as a shell loop) or through one server per mode (`--via serve`), with
`auto` (drafting from what the session wrote before) against `off` and llama-cpp-python's
plain chat completion (bench/session_runner.py, bench/session_report.py)."""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from specchat import fileio
from specchat.bench import session_report as report
from specchat.bench.peer import ChatCompletionPeer
from specchat.bench.runner import parse_modes
from specchat.bench.session_runner import Launch, Outcome, run_sessions, specchat_argv
from specchat.bench.sessions import Session, load_sessions
from specchat.commands import common as c
from specchat.engine.options import Spec
from specchat.errors import EXIT_INTERRUPTED, ModelError, UsageError
from specchat.settings.file import Settings
from specchat.settings.schema import BY_NAME, MODEL, group

VIAS = ("ask", "serve")
# How the models load, for every child process alike (verbose would only fill the log).
PASSED_ON = tuple(name for name in group(MODEL) if name != "verbose")


def bench_sessions(file: Path | None, categories: str | None, limit: int | None,
                   modes: str | None, json_file: str | None, peer: bool, via: str,
                   settings: Settings, rounds: int = 1) -> None:
    if via not in VIAS:
        raise UsageError(f"--via must be one of {', '.join(VIAS)}, not {via!r}")
    sessions = _chosen(load_sessions(file), categories, limit)
    with_tools = [s.name for s in sessions if s.tools]
    if with_tools and via != "serve":
        raise UsageError(f"session {with_tools[0]} has tools, which `specchat ask` does not "
                         "take: run it with --via serve")
    mode_list = parse_modes(modes, (Spec.AUTO,))
    launch = Launch(specchat_argv(), flags_passed_on(settings), settings["max_tokens"])
    plain = _peer(settings) if peer else None
    if plain is not None:
        mode_list = [*mode_list, plain.name]
    console = Console(stderr=True)

    def heard(o: Outcome) -> None:
        rate = o.generated / o.decode_seconds if o.decode_seconds > 0 else 0.0
        round_ = f"round {o.round + 1}: " if rounds > 1 else ""
        console.print(f"{round_}{o.session} {o.index + 1} {o.mode}: {o.generated} tokens, "
                      f"{rate:.1f} tok/s", highlight=False)

    with tempfile.TemporaryDirectory(prefix="specchat-sessions-") as work:
        fileio.make_dirs(Path(work), private=True)  # the stores hold the sessions' words
        try:
            run = run_sessions(sessions, mode_list, launch, Path(work), via=via, peer=plain,
                               listener=heard, rounds=rounds)
        finally:
            if plain is not None:
                plain.llm.close()
    rows = report.summarize(run.outcomes, mode_list)
    report.render(Console(stderr=json_file == "-"), rows, mode_list)
    if json_file is not None:
        described = {"file": str(file) if file else "<built-in sessions>", "via": via,
                     "modes": mode_list, "rounds": rounds, "max_tokens": launch.max_tokens,
                     "model_flags": list(launch.model_flags), "interrupted": run.interrupted}
        c.write_report(json_file, json.dumps(
            report.to_json(run.outcomes, rows, mode_list, described), indent=1))
    if run.interrupted:
        print("specchat: interrupted: the tables cover the requests answered in every mode",
              file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)


def _chosen(sessions: list[Session], categories: str | None,
            limit: int | None) -> list[Session]:
    if categories:
        wanted = {c.strip() for c in categories.split(",") if c.strip()}
        known = {s.category for s in sessions}
        if wanted - known:
            raise UsageError(f"no session of categor{'y' if len(wanted - known) == 1 else 'ies'}"
                             f" {', '.join(sorted(wanted - known))}; these have: "
                             f"{', '.join(sorted(known))}")
        sessions = [s for s in sessions if s.category in wanted]
    if limit is not None:
        if limit < 2:
            raise UsageError("--limit with --sessions counts requests per session: give at "
                             "least 2 (the first only fills the store)")
        sessions = [replace(s, requests=s.requests[:limit]) for s in sessions]
    return sessions


def flags_passed_on(settings: Settings) -> tuple[str, ...]:
    flags: list[str] = []
    for name in PASSED_ON:
        value, option = settings[name], BY_NAME[name]
        if option.kind is bool:
            flags.append(option.flag if value else option.flag.replace("--", "--no-", 1))
        elif value is not None:
            flags += [option.flag, option.show(value)]
    return tuple(flags)


def _peer(settings: Settings) -> ChatCompletionPeer | None:
    """llama-cpp-python's Llama on the target file, in this process (bench/peer.py)."""
    from specchat.llm import plain_chat_llama
    from specchat.llm.ggml import default_threads
    from specchat.models import DEFAULT_TARGET, resolve_model

    path = resolve_model(settings["model"] or DEFAULT_TARGET, quiet=True)
    try:
        llm: Any = plain_chat_llama(str(path), n_ctx=settings["ctx"] or 4096,
                                    n_threads=settings["threads"] or default_threads(),
                                    n_gpu_layers=settings["n_gpu_layers"])
    except (ModelError, ValueError) as exc:
        print(f"specchat: note: the llama-cpp baseline is left out: {exc}", file=sys.stderr)
        return None
    return ChatCompletionPeer(llm)
