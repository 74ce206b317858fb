"""`bench --sessions`: every session's requests in order, in each mode, the way they are
really sent: each request a fresh `specchat ask` process (a shell loop), or every request
to one `specchat serve` process per mode (an agent calling a server).

Each mode gets a drafting store of its own, empty at the start (SPECCHAT_DRAFT_STORE_DIR,
and SPECCHAT_SERVE_STORE_DIR for a server):
per session with processes, per round with a server (a server keeps one store across the
sessions it serves, so every round starts new servers). Speed is the engine's own decode time
(tokens over seconds after the prefill), read from `ask --json` or the server's
`usage.speculative`; llama-cpp-python's plain chat completion runs in this process
(bench/peer.py). Modes alternate request by request, so a machine that drifts meanwhile hits
every mode alike; with several rounds every session runs again from empty stores, and each
(request, round) is one pair of runs for the intervals.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat import fileio
from specchat.bench.prompts import BenchPrompt
from specchat.bench.runner import Peer, mode_order
from specchat.bench.sessions import Session
from specchat.errors import SpecchatError

SERVE_START_SECONDS = 600.0  # loading and a first calibration can take minutes
REQUEST_SECONDS = 1800.0


@dataclass
class Outcome:
    """One request answered in one mode."""

    session: str
    index: int  # the request's place in its session (0: the first)
    mode: str
    generated: int
    decode_seconds: float
    steps: int
    text: str
    tokens: list[int] = field(default_factory=list)
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    round: int = 0  # which pass over the sessions (--rounds), each from empty stores

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Launch:
    """How to start specchat in another process: the command, model flags, environment."""

    argv: tuple[str, ...]  # e.g. (python, -m, specchat)
    model_flags: tuple[str, ...]
    max_tokens: int
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    def with_store(self, directory: Path) -> dict[str, str]:
        # A server keeps its clients' stores apart from the owner's (backend/clients.py):
        # both point at the mode's own, so neither reads nor fills the user's.
        return {**self.env, "SPECCHAT_DRAFT_STORE_DIR": str(directory),
                "SPECCHAT_SERVE_STORE_DIR": str(directory), "NO_COLOR": "1"}


Listener = Callable[[Outcome], None]


@dataclass
class SessionsRun:
    outcomes: list[Outcome] = field(default_factory=list)  # whole requests: every mode's run
    interrupted: bool = False  # Ctrl-C: the request in flight was dropped, the rest kept


def run_sessions(sessions: Sequence[Session], modes: Sequence[str], launch: Launch,
                 workdir: Path, *, via: str = "ask", peer: Peer | None = None,
                 listener: Listener | None = None, rounds: int = 1) -> SessionsRun:
    """Every request of every session in every mode (and the peer's, by its name), `rounds`
    times over, each round in a folder of its own under `workdir`. Ctrl-C keeps the requests
    already answered in every mode."""
    run = SessionsRun()
    requests = sum(len(s.requests) for s in sessions)
    try:
        for round_ in range(rounds):
            folder = fileio.make_dirs(workdir / f"round-{round_ + 1}", private=True)
            # The order of modes keeps rotating across rounds: turns count on from the last.
            _run_round(sessions, modes, launch, folder, via, peer, listener, round_,
                       round_ * requests, run.outcomes)
    except KeyboardInterrupt:
        run.interrupted = True
    return run


def _run_round(sessions: Sequence[Session], modes: Sequence[str], launch: Launch,
               folder: Path, via: str, peer: Peer | None, listener: Listener | None,
               round_: int, first_turn: int, out: list[Outcome]) -> None:
    """One round, each request's runs added to `out` once it is answered in every mode (a
    request missing a mode would bias the sums)."""
    ours = [m for m in modes if peer is None or m != peer.name]
    with ExitStack() as stack:
        servers = ({m: stack.enter_context(_server(launch, m, folder / f"serve-{m}"))
                    for m in ours} if via == "serve" else {})
        turn = first_turn
        for s in sessions:
            for i, request in enumerate(s.requests):
                turn += 1
                answered: list[Outcome] = []
                for mode in mode_order(list(modes), turn):
                    got: Outcome | None
                    if peer is not None and mode == peer.name:
                        got = _peer_outcome(peer, s, i, request, launch.max_tokens)
                    elif via == "serve":
                        got = _serve_request(servers[mode], s, i, request, mode, launch)
                    else:
                        got = _ask_request(launch, s, i, request, mode,
                                           folder / store_folder(s.name, mode))
                    if got is None:
                        continue
                    got.round = round_
                    answered.append(got)
                    if listener is not None:
                        listener(got)
                out.extend(answered)


def store_folder(session: str, mode: str) -> str:
    """The name of a session's store folder in one mode: one plain name, never a path (a
    session is named by a file's author: `/tmp/x` or `../../y` must stay in the work
    folder); the hash keeps names apart that differ only in what was replaced."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", session)[:40].strip("_") or "session"
    return f"{slug}-{hashlib.sha256(session.encode('utf-8')).hexdigest()[:8]}-{mode}"


def _ask_request(launch: Launch, session: Session, index: int, request: str, mode: str,
                 store: Path) -> Outcome:
    argv = [*launch.argv, "ask", "--json", "--spec", mode, "-n", str(launch.max_tokens),
            "--temperature", "0", "--prompt-cache", "0", *launch.model_flags]
    if session.system:
        argv += ["--system", session.system]
    if session.schema is not None:
        argv += ["--schema", session.schema]
    proc = subprocess.run([*argv, "--", request], env=launch.with_store(store),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=REQUEST_SECONDS, check=False)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise SpecchatError(f"`specchat ask` failed on {session.name} request {index + 1} "
                            f"({mode}): {reason}")
    data = json.loads(proc.stdout)
    stats = data["stats"]
    return Outcome(session.name, index, mode, stats["generated"], stats["decode_seconds"],
                   stats["steps"], data["text"], list(data["tokens"]),
                   stats.get("sources", {}))


@dataclass
class _Server:
    process: subprocess.Popen[bytes]
    url: str
    model: str = ""  # the name it serves (GET /v1/models)


@contextmanager
def _server(launch: Launch, mode: str, store: Path) -> Iterator[_Server]:
    port = _free_port()
    log = (store.parent / f"serve-{mode}.log").open("wb")
    argv = [*launch.argv, "serve", "--host", "127.0.0.1", "--port", str(port), "--spec", mode,
            *launch.model_flags]
    proc = subprocess.Popen(argv, env=launch.with_store(store), stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT)
    server = _Server(proc, f"http://127.0.0.1:{port}")
    try:
        _wait_ready(server, log.name)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_ready(server: _Server, log: str) -> None:
    deadline = time.monotonic() + SERVE_START_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SpecchatError(f"`specchat serve` stopped while starting (log: {log})")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=5) as reply:
                ready = reply.status == 200
            if ready:
                with urllib.request.urlopen(f"{server.url}/v1/models", timeout=5) as reply:
                    server.model = str(json.loads(reply.read())["data"][0]["id"])
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SpecchatError(f"`specchat serve` was not ready within {SERVE_START_SECONDS:.0f} s "
                        f"(log: {log})")


def _serve_request(server: _Server, session: Session, index: int, request: str, mode: str,
                   launch: Launch) -> Outcome:
    fields: dict[str, Any] = {"model": server.model, "messages": session.messages(request),
                              "max_tokens": launch.max_tokens, "temperature": 0}
    if session.schema is not None:
        fields["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": json.loads(session.schema), "strict": True}}
    if session.tools:
        fields["tools"] = session.tools
        if session.tool_choice is not None:
            fields["tool_choice"] = session.tool_choice
    body = json.dumps(fields).encode()
    ask = urllib.request.Request(f"{server.url}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(ask, timeout=REQUEST_SECONDS) as reply:
            data = json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise SpecchatError(f"the {mode} server answered {exc.code} on {session.name} "
                            f"request {index + 1}: {exc.read()[:200]!r}") from None
    usage = data["usage"]["speculative"]
    return Outcome(session.name, index, mode, data["usage"]["completion_tokens"],
                   usage["decode_seconds"], usage["steps"],
                   _answer_text(data["choices"][0]["message"]), [], usage.get("sources", {}))


def _answer_text(message: dict[str, Any]) -> str:
    """What the answer said, its tool calls included (their ids are random, so left out):
    answers of two modes compare by it."""
    calls = [(c["function"]["name"], c["function"]["arguments"])
             for c in message.get("tool_calls") or ()]
    text = message.get("content") or ""
    return f"{text}\n{json.dumps(calls)}" if calls else text


def _peer_outcome(peer: Peer, session: Session, index: int, request: str,
                  max_tokens: int) -> Outcome | None:
    """llama-cpp-python's plain chat completion; its decode time is after its first token
    (it has no split of its own), and its system prompt goes in the text. None for a
    session with tools, which its plain completion would not compare with."""
    if session.tools:
        return None
    text = f"{session.system}\n\n{request}" if session.system else request
    prompt = BenchPrompt(f"{session.name}-{index}", session.category, text,
                         schema=session.schema)
    record = peer.run(prompt, 0, max_tokens, None)
    return Outcome(session.name, index, peer.name, record.generated, record.decode_seconds,
                   record.steps, record.text, list(record.tokens))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def specchat_argv() -> tuple[str, ...]:
    return (sys.executable, "-m", "specchat")
