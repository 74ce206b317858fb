"""Small contexts, what a first start measures, and flash attention, on a real GGUF model
(SmolLM2-135M) through the real CLI and a real server process.

Nothing here asserts a timing: what is checked is what was measured, what was kept and what
each setting loads with (llama.cpp's own log with --verbose).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specchat.backend.calibration import TARGET_SIZES, Samples
from specchat.backend.calibrationfile import CalibrationCache

pytestmark = pytest.mark.real
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("smollm2-135m")


def _env(home: Path) -> dict[str, str]:
    # A home of its own: its calibration file starts empty, as on a new machine.
    return {**os.environ, "SPECCHAT_HOME": str(home), "NO_COLOR": "1"}


def _specchat(args: list[str], home: Path, stdin: str = "",
              timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specchat", *args], input=stdin,
                          env=_env(home), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _tables(home: Path) -> list[dict[str, object]]:
    saved = CalibrationCache(home / "calibration.json").read()
    return [v for v in saved.values() if isinstance(v, dict) and "samples" in v]


# --- contexts below llama.cpp's batch size ---------------------------------------------------
@pytest.mark.parametrize("ctx", [16, 20, 64])
def test_small_contexts_answer_instead_of_aborting(smol: Path, tmp_path: Path,
                                                   ctx: int) -> None:
    for spec in ("off", "auto"):
        done = _specchat(["ask", "-m", str(smol), "--ctx", str(ctx), "--spec", spec, "-n", "4",
                          "Say hi"], tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() and "GGML_ASSERT" not in done.stderr


def test_a_prompt_longer_than_a_small_context_is_one_line(smol: Path, tmp_path: Path) -> None:
    long = "word " * 600  # longer than the 256 positions llama.cpp makes of --ctx 64
    done = _specchat(["ask", "-m", str(smol), "--ctx", "64", "--spec", "off", "-n", "4"],
                     tmp_path, stdin=long)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "raise --ctx or shorten the prompt" in lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def small_server(smol: Path, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "specchat", "serve", "-m", str(smol),
                             "--ctx", "64", "--spec", "off", "--port", str(port)],
                            cwd=ROOT, env=_env(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    try:
        yield url, proc
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_a_server_with_a_small_context_survives_its_requests(
        small_server: tuple[str, subprocess.Popen[str]]) -> None:
    openai = pytest.importorskip("openai")
    url, proc = small_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    for question in ("Say hi", "Say bye"):
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": question}], max_tokens=4,
            temperature=0)
        assert reply.choices[0].message.content
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, max_tokens=4, messages=[
            {"role": "user", "content": "word " * 600}])
    assert proc.poll() is None  # still serving


# --- a first start ---------------------------------------------------------------------------
def test_a_first_start_measures_briefly_and_runs_flash_attention_off_on_the_cpu(
        smol: Path, tmp_path: Path) -> None:
    done = _specchat(["ask", "-m", str(smol), "-n", "4", "Say hi"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "costs here (first starts only, 2 s at most, then the answer" in done.stderr
    assert "flash attention" not in done.stderr
    saved = CalibrationCache(tmp_path / "calibration.json").read()
    assert not any(k.startswith("flash-attn-") for k in saved)  # nothing measured for it
    [table] = _tables(tmp_path)
    assert Samples.from_entry(table).best  # some sizes measured, the rest on later starts
    verbose = _specchat(["ask", "-m", str(smol), "-n", "1", "--verbose", "--exact", "hi"],
                        tmp_path)
    assert "flash_attn            = enabled" in verbose.stderr  # exact keeps it on
    plain = _specchat(["ask", "-m", str(smol), "-n", "1", "--verbose", "hi"], tmp_path)
    assert "flash_attn            = disabled" in plain.stderr  # auto on the CPU: off
    pinned = _specchat(["ask", "-m", str(smol), "-n", "1", "--verbose", "--flash-attn", "off",
                        "hi"], tmp_path)
    assert "flash_attn            = disabled" in pinned.stderr
    doctor = _specchat(["doctor"], tmp_path)
    assert "flash attention: auto (default): off where every layer runs on the CPU" \
        in doctor.stdout
    (tmp_path / "config.toml").write_text('flash_attn = "on"\n')
    doctor = _specchat(["doctor"], tmp_path)
    assert "flash attention: on (file): pinned on" in doctor.stdout


@pytest.mark.slow
def test_samples_taken_while_other_processes_hold_the_cores_confirm_nothing(
        smol: Path, tmp_path: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 2))]
    try:
        done = _specchat(["ask", "-m", str(smol), "-n", "2", "--threads", "2", "hi"],
                         tmp_path)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    [table] = _tables(tmp_path)
    samples = Samples.from_entry(table)
    assert samples.best and all(q == 0 for q in samples.quiet.values())
    assert not samples.finished(TARGET_SIZES)  # later starts measure again
