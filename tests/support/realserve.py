"""A real `specchat serve` process on a real GGUF model for tests: started on a free port with
an API key, driven through the real `openai` client, its log read back, stopped by a signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.serveproc import free_port, wait_ready
from tests.support.serveproc import stop as stop_process

if TYPE_CHECKING:
    import openai

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
KEY = "test-key-123"
COMMON = ["--spec", "ngram", "--ctx", "2048", "--threads", "2"]


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    log: Path
    env: dict[str, str]

    def client(self, key: str = KEY) -> openai.OpenAI:
        import openai  # the tests that call this skip without it (pytest.importorskip)

        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0,
                             timeout=600)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_log(self, text: str) -> str:
        """The log once it holds `text`: a request's line is written after its last byte
        went out, so a client can be a moment ahead of it."""
        for _ in range(600):
            log = self.log_text()
            if text in log:
                return log
            time.sleep(0.1)
        return self.log_text()


def serve_env(home: Path, model: Path) -> dict[str, str]:
    """The environment of a specchat process with its own home and `model`'s folder as cache."""
    return {**os.environ, "SPECCHAT_HOME": str(home), "SPECCHAT_CACHE": str(model.parent),
            "NO_COLOR": "1"}


def start_server(home: Path, model: Path, *extra: str) -> Served:
    port = free_port()
    env = serve_env(home, model)
    log = home / f"serve-{port}.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specchat", "serve", "-m", MODEL, "--port", str(port),
             *COMMON, *extra], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=sink,
            text=True)
    served = Served(f"http://127.0.0.1:{port}", proc, log, env)
    wait_ready(proc, served.url, log)
    return served


def stop(served: Served, sig: int = signal.SIGTERM) -> int:
    return stop_process(served.proc, sig)


def serve_preset(home: Path, path: Path, name: str) -> Iterator[Served]:
    """A server of the preset `name` (cached at `path`) for a module's tests; no traceback
    may reach its log. The last -m wins: start_server names SmolLM2 first."""
    server = start_server(home, path, "-m", name, "--api-key", KEY)
    yield server
    stop(server)
    assert "Traceback" not in server.log_text()
