"""`specchat ask --endpoint` against llama-cpp-python's own OpenAI-compatible server
(`python -m llama_cpp.server`) as a real process on the same GGUF: at temperature 0 its answer
is the local one (every sampler setting is sent, so the server's own defaults cannot change
it), figures the server does not report print as unknown, and `--format json` reaches it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.serveproc import free_port, wait_ready

pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extras are "
                    "not installed (pip install 'llama-cpp-python[server]')")
httpx = pytest.importorskip("httpx")
pytestmark = [pytest.mark.real, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def lcp_server(real_model_path: Callable[[str], Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("lcp") / "server.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(real_model_path(MODEL)),
             "--port", str(port), "--host", "127.0.0.1", "--n_ctx", "2048",
             "--n_threads", "2"], stdout=sink, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, log, path="/v1/models", name="llama_cpp.server")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def ask(home: Path, model: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home), "SPECCHAT_CACHE": str(model.parent),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "specchat", "ask", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_ask_endpoint_on_llama_cpp_server_gives_the_local_answer(
        lcp_server: str, real_model_path: Callable[[str], Path], tmp_path: Path) -> None:
    model = real_model_path(MODEL)
    common = ["-t", "0", "-n", "24", QUESTION]
    # Flash attention moves near-ties (docs/exactness.md): pinned to the server's setting
    # (llama-cpp-python's server loads without it).
    local = ask(tmp_path, model, "-m", MODEL, "--spec", "off", "--threads", "2",
                "--flash-attn", "off", *common)
    assert local.returncode == 0 and local.stdout.strip(), local.stderr
    remote = ask(tmp_path, model, "--endpoint", lcp_server, *common)
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    assert "Traceback" not in remote.stderr
    stats = ask(tmp_path, model, "--endpoint", lcp_server, "--json", *common)
    record = json.loads(stats.stdout)
    assert record["stats"]["steps"] is None  # llama-cpp-python does not say: unknown, not 0
    assert record["stats"]["generated"] >= 1
    shaped = ask(tmp_path, model, "--endpoint", lcp_server, "--format", "json", "-t", "0",
                 "-n", "64", "Describe a dog as a JSON object.")
    if shaped.returncode == 0:
        assert isinstance(json.loads(shaped.stdout), dict)
    else:  # only the "ran out of tokens" exit is allowed, in one line
        assert shaped.returncode == 1 and len(shaped.stderr.strip().splitlines()) == 1
