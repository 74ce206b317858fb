"""Settings that stick, through the real CLI in a subprocess: the config file, profiles,
environment variables and flags, each layer over the next; `config path`; bad files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specchat.commands import ask as ask_cmd
from tests.support.clirun import FakeStdin, run_cli
from tests.support.fake_runtime import fake_runtime

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
# my own notes: kept by /save-settings
temperature = 0.1   # warm, but not too warm
top_k = 3
top-p = 0.5
min_p = 0.05

[profile.p]
temperature = 0.2
top_k = 4
top_p = 0.6
"""


def specchat(args: list[str], tmp: Path, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    clean.update({"SPECCHAT_HOME": str(tmp / "home"), "PYTHONPATH": str(ROOT),
                  "SPECCHAT_CONFIG": str(tmp / "config.toml"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "specchat", *args], cwd=tmp, env=clean,
                          capture_output=True, text=True, check=False, timeout=120)


def table(out: str) -> dict[str, tuple[str, str]]:
    """`specchat config` rows: name -> (value, source)."""
    rows = {}
    for line in out.splitlines():
        name, rest = line.split(None, 1)
        value, source = rest.rsplit("  ", 1)
        rows[name] = (value.strip(), source.strip())
    return rows


@pytest.mark.parametrize("layers, want", [
    (("flag", "env", "profile", "file"), ("0.4", "flag")),
    (("env", "profile", "file"), ("0.3", "env")),
    (("profile", "file"), ("0.2", "profile p")),
    (("file",), ("0.1", "file")),
    ((), ("0.0", "default")),
])
def test_each_layer_wins_over_the_next(tmp_path: Path, layers: tuple[str, ...],
                                       want: tuple[str, str]) -> None:
    if "file" in layers:
        (tmp_path / "config.toml").write_text(CONFIG)
    env = {"SPECCHAT_TEMPERATURE": "0.3"} if "env" in layers else {}
    args = ["config"] + (["-t", "0.4"] if "flag" in layers else [])
    args += ["--profile", "p"] if "profile" in layers else []
    done = specchat(args, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert table(done.stdout)["temperature"] == want


def test_all_layers_at_once_and_profile_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    done = specchat(["config", "-t", "0.4"], tmp_path,
                    {"SPECCHAT_TOP_K": "5", "SPECCHAT_PROFILE": "p"})
    rows = table(done.stdout)
    assert rows["temperature"] == ("0.4", "flag")
    assert rows["top_k"] == ("5", "env")
    assert rows["top_p"] == ("0.6", "profile p")
    assert rows["min_p"] == ("0.05", "file")
    assert rows["repeat_penalty"] == ("1.0", "default")
    assert rows["api_key"] == ("none", "default")
    assert set(rows) >= {"model", "draft", "ctx", "spec", "max_tokens", "system", "stop"}


def test_config_path(tmp_path: Path) -> None:
    assert specchat(["config", "path"], tmp_path).stdout == f"{tmp_path / 'config.toml'}\n"
    env = {"SPECCHAT_CONFIG": "", "SPECCHAT_HOME": "", "XDG_CONFIG_HOME": str(tmp_path / "x")}
    done = specchat(["config", "path"], tmp_path, env)
    assert done.stdout == f"{tmp_path / 'x' / 'specchat' / 'config.toml'}\n"


@pytest.mark.parametrize("text, where, what", [
    ("tempreature = 0.5\n", "unknown key 'tempreature' (did you mean temperature?)", ""),
    ("top_p = 3\n", "top_p", "must be in (0, 1]"),
    ("[profile.x]\nspec = 'fast'\n", "[profile.x] spec", "must be one of auto, draft"),
    ("max_tokens = 'many'\n", "max_tokens", "needs an integer"),
    ("model = [1\n", "not valid TOML", ""),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, text: str, where: str,
                                            what: str) -> None:
    (tmp_path / "config.toml").write_text(text)
    commands = [["config"], ["ask", "hi"], ["chat"], ["bench"]] if "top_p" in text \
        else [["config"]]  # every command reads the file the same way: once is enough
    for args in commands:
        done = specchat(args, tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("specchat: error: ")
        assert str(tmp_path / "config.toml") in lines[0] and where in lines[0]
        assert what in lines[0] and done.stdout == ""
    # The path is exactly what a user needs to fix a broken file: it still prints.
    assert specchat(["config", "path"], tmp_path).returncode == 0


def test_unknown_profile(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    done = specchat(["config", "--profile", "nope"], tmp_path)
    assert done.returncode == 2
    assert "no profile 'nope'" in done.stderr and "profiles: p" in done.stderr


def test_ask_answers_with_the_files_settings(tmp_path: Path, monkeypatch: Any,
                                             capsys: Any) -> None:
    (tmp_path / "config.toml").write_text(
        'model = "from-file"\nmax_tokens = 3\nspec = "off"\n[profile.long]\nmax_tokens = 9\n')
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    made: dict[str, Any] = {}

    def open_fake(settings: Any) -> Any:
        made["settings"] = settings
        return fake_runtime()

    monkeypatch.setattr(ask_cmd, "open_runtime", open_fake)
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    code, out, _ = run_cli(["ask", "--json", "hello"], capsys)
    assert code == 0 and len(json.loads(out)["tokens"]) == 3
    assert made["settings"].model == "from-file" and made["settings"].spec == "off"
    code, out, _ = run_cli(["ask", "--json", "--profile", "long", "hello"], capsys)
    code, flagged, _ = run_cli(["ask", "--json", "-n", "9", "hello"], capsys)
    assert json.loads(out)["tokens"] == json.loads(flagged)["tokens"]
    assert len(json.loads(out)["tokens"]) > 3
    code, out, _ = run_cli(["ask", "--json", "--profile", "long", "-n", "2", "hello"], capsys)
    assert len(json.loads(out)["tokens"]) == 2
