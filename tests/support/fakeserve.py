"""A real `specchat serve` process on the fake model (tests/support/serve_fake_cli.py: the real
CLI and server, a scripted model that logs each call): start it on a free port, talk to it
through httpx or the real `openai` client, stop it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from tests.support.serveproc import free_port, wait_ready
from tests.support.serveproc import stop as stop_process

if TYPE_CHECKING:
    import openai

ROOT = Path(__file__).resolve().parents[2]
MODEL = "fake-model"
HELLO = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@dataclass
class Server:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    calls: Path  # one line per model call

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def model_calls(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0

    def client(self, **kw: object) -> openai.OpenAI:
        import openai  # the tests that call this skip without it (pytest.importorskip)

        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0,
                             timeout=60, **kw)  # type: ignore[arg-type]

    def post(self, body: bytes | str, *, content_type: str = "application/json",
             **headers: str) -> httpx.Response:
        data = body.encode() if isinstance(body, str) else body
        return httpx.post(self.url + "/v1/chat/completions", content=data, timeout=60,
                          headers={"Content-Type": content_type, **headers})


def start(home: Path, *args: str, delay: float = 0.0, files: int | None = None) -> Server:
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log, calls = home / f"serve-{port}.log", home / f"calls-{port}.log"
    env = {**os.environ, "SPECCHAT_HOME": str(home), "PYTHONPATH": str(ROOT),
           "SERVE_FAKE_DELAY": str(delay), "SERVE_FAKE_LOG": str(calls)}

    command = [sys.executable, "-m", "tests.support.serve_fake_cli", "serve", "-m", MODEL, "--port",
               str(port), "--spec", "off", *args]
    if files is not None:  # a low open-file limit, as `ulimit -n` sets it
        command = ["bash", "-c", f"ulimit -n {files} && exec \"$@\"", "serve", *command]
    with log.open("w") as sink:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=sink)
    server = Server(f"http://127.0.0.1:{port}", port, proc, log, calls)
    wait_ready(proc, server.url, log)
    return server


def stop(server: Server) -> None:
    stop_process(server.proc)
