"""CI's smoke test of a plain install
(`python -m tests.support.smoke_install PATH/TO/bin/specchat`).

The test suite runs with the test extras installed, so a runtime import that only a test
extra provides (httpx, once) passes every test and fails every user. This runs the
`specchat` of a virtualenv that holds nothing but `pip install .`: it pulls a real GGUF file
from a local fake hub (tests/support/fakehub.py, reached through HF_ENDPOINT, as
tests/models/test_hub.py does) and gets one answer from it, in a home of its own. The file
served is the smallest test model, fetched here by specchat's own pull code (cached in the
user cache after the first time).

Not a pytest module (its name does not start with test_): it needs a second virtualenv.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from specchat.models import resolve_model
from tests.support.fakehub import FakeHub, serve

REPO = "smoke/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"
REF = f"{REPO}:Q4_1"
CLEARED = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "SPECCHAT_NO_HUB",
           "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy",
           "SPECCHAT_CACHE", "SPECCHAT_DRAFT_STORE_DIR", "PYTHONPATH", "XDG_STATE_HOME")


def run(specchat: str, args: list[str], env: dict[str, str], cwd: Path) -> str:
    """One command of the installed CLI; its stdout, or SystemExit saying what went wrong."""
    done = subprocess.run([specchat, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600, check=False)
    if done.returncode != 0 or "Traceback" in done.stderr:
        raise SystemExit(f"smoke: `specchat {' '.join(args)}` exited {done.returncode}:\n"
                         f"{done.stderr.strip()[-3000:]}")
    return done.stdout


def main(specchat: str) -> None:
    model = resolve_model("smollm2-135m", quiet=True).read_bytes()
    with tempfile.TemporaryDirectory(prefix="specchat-smoke-") as tmp, \
            serve(FakeHub({REPO: {FILE: model}})) as hub:
        home = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home / "hf"),
                   SPECCHAT_HOME=str(home / "specchat"), NO_COLOR="1")
        run(specchat, ["pull", REF], env, home)
        got = [path for method, path, _ in hub.file_requests() if path.endswith(FILE)]
        if not got:
            raise SystemExit(f"smoke: `specchat pull {REF}` asked the fake hub for nothing")
        answer = run(specchat, ["ask", "-m", REF, "--spec", "off", "-n", "8",
                                "--temperature", "0", "Say hello."], env, home)
        if not answer.strip():
            raise SystemExit("smoke: `specchat ask` printed no answer")
    print(f"smoke: a plain install pulled {REF} from a fake hub and answered "
          f"{answer.strip()[:60]!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.support.smoke_install PATH/TO/bin/specchat")
    main(sys.argv[1])
