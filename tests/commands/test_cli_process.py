"""The real CLI in a real process on real models, where the audit found tracebacks.

Ctrl-C while a model loads, a closed pipe, a full disk, a closed stdin and --seed -1. Each runs
`python -m specchat` the way a shell would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
SMALL = "smollm2-135m"
QUIET = ["--spec", "off"]  # no draft model, no calibration: straight to the answer


def env(tmp_path: Path, model: Path) -> dict[str, str]:
    """State in tmp_path; the model cache is the one the fixture found the model in."""
    return {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(tmp_path / "state"), "SPECCHAT_CACHE": str(model.parent),
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def small(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path(SMALL)


def specchat(*args: str) -> list[str]:
    return [sys.executable, "-m", "specchat", *args]


def clean(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace")
    assert "Traceback" not in text and "Exception ignored" not in text, text
    return text


def test_closed_pipe_ends_quietly(tmp_path: Path, small: Path) -> None:
    proc = subprocess.Popen(specchat("ask", "-m", str(small), *QUIET, "-n", "300",
                                     "Write a long story about a lighthouse keeper."),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env(tmp_path, small), cwd=tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(10)  # `| head -c 10`
    proc.stdout.close()
    err = proc.stderr.read()
    code = proc.wait()
    assert len(head) == 10
    assert code == 0  # the reader chose to stop: not an error (README, exit codes)
    assert clean(err) == ""


def test_full_disk_is_one_line_and_exit_1(tmp_path: Path, small: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "wb") as full:
        done = subprocess.run(specchat("ask", "-m", str(small), *QUIET, "-n", "20", "hi"),
                              stdout=full, stderr=subprocess.PIPE, env=env(tmp_path, small),
                              cwd=tmp_path)
    err = clean(done.stderr)
    assert done.returncode == 1
    assert err.count("\n") == 1 and err.startswith("specchat: error: ")
    assert "no space left on device" in err


@pytest.mark.parametrize("args", [
    ["ask", "-m", "{small}", *QUIET, "-n", "4", "hi"],
    ["-m", "{small}", *QUIET, "-n", "4", "hi"],
    ["chat", "-m", "{small}", *QUIET],
    ["history"], ["models"], ["doctor"], ["pull", SMALL], ["--version"],
    ["bench", "-m", "{small}", "--modes", "off", "--limit", "1", "-n", "4",
     "--categories", "qa"],
])
def test_closed_stdin_is_no_input_on_every_command(tmp_path: Path, small: Path,
                                                   args: list[str]) -> None:
    argv = [a.replace("{small}", str(small)) for a in args]
    done = subprocess.run(specchat(*argv), capture_output=True, env=env(tmp_path, small),
                          cwd=tmp_path, close_fds=True,
                          preexec_fn=lambda: os.close(0))  # `specchat ... <&-`
    clean(done.stderr)
    assert done.returncode == 0, done.stderr.decode()


def test_seed_minus_one_means_random(tmp_path: Path, small: Path) -> None:
    done = subprocess.run(specchat("ask", "-m", str(small), *QUIET, "-n", "8", "-t", "0.8",
                                   "--seed", "-1", "hi"),
                          capture_output=True, env=env(tmp_path, small),
                          cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert clean(done.stderr) == "" and done.returncode == 0
    assert done.stdout.strip()
    bad = subprocess.run(specchat("ask", "-m", str(small), "--seed", "-2", "hi"),
                         capture_output=True, env=env(tmp_path, small),
                         cwd=tmp_path, stdin=subprocess.DEVNULL)
    err = clean(bad.stderr)
    assert bad.returncode == 2 and err.count("\n") == 1 and "seed" in err


def _mapped(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.slow
def test_ctrl_c_while_the_model_loads_exits_130_at_once(
        tmp_path: Path, real_model_path: Callable[[str], Path]) -> None:
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc to see when the model file is being loaded")
    model = real_model_path("qwen2.5-coder-1.5b")
    proc = subprocess.Popen(specchat("ask", "-m", str(model), *QUIET, "-n", "4", "hi"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env(tmp_path, model), cwd=tmp_path)
    # llama.cpp maps the file as the load starts: that is "while the model loads".
    while proc.poll() is None and not _mapped(proc.pid, model.name):
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    text = clean(err)
    assert proc.returncode == 130, text
    assert out == b"" and text == "specchat: error: interrupted\n"

