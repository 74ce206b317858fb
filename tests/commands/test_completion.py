"""Shell completion through the real program, driven by the variables the shells' scripts set
(click/typer's protocol): commands, options, choices, presets and cached model files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def complete(tmp: Path, shell: str, words: str, cword: int | None = None,
             extra: dict[str, str] | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    env.update({"PYTHONPATH": str(ROOT), "SPECCHAT_HOME": str(tmp),
                "SPECCHAT_CACHE": str(tmp / "cache"), "_SPECCHAT_COMPLETE": f"complete_{shell}"})
    if shell == "bash":
        env.update({"COMP_WORDS": words, "COMP_CWORD": str(cword)})
    else:
        env["_TYPER_COMPLETE_ARGS"] = words
        if shell == "fish":
            env["_TYPER_COMPLETE_FISH_ACTION"] = "get-args"
    env.update(extra or {})
    done = subprocess.run([sys.executable, "-m", "specchat"], env=env, cwd=tmp,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "mine.gguf").write_bytes(b"GGUF")
    (tmp_path / "cache" / "notes.txt").write_text("x")
    return tmp_path


def test_bash_commands_and_subcommands(cache: Path) -> None:
    assert complete(cache, "bash", "specchat hi", 1) == ["history"]
    assert set(complete(cache, "bash", "specchat ", 1)) >= {
        "ask", "chat", "history", "config", "models", "pull", "bench", "doctor"}
    assert complete(cache, "bash", "specchat history ", 2) == [
        "search", "show", "rm", "store", "export"]


def test_bash_models_presets_and_cached_files(cache: Path) -> None:
    assert complete(cache, "bash", "specchat chat --model sm", 3) == ["smollm2-135m"]
    found = complete(cache, "bash", "specchat ask -m ", 3)
    assert {"qwen2.5-coder-1.5b", "gemma3-270m", str(cache / "cache" / "mine.gguf")} <= set(found)
    assert not any(f.endswith("notes.txt") for f in found)
    assert complete(cache, "bash", "specchat chat -d n", 3) == ["none"]


def test_zsh_options_and_choices(cache: Path) -> None:
    out = "\n".join(complete(cache, "zsh", "specchat chat --spec "))
    for mode in ("auto", "draft", "ngram", "off"):
        assert f'"{mode}"' in out
    out = "\n".join(complete(cache, "zsh", "specchat ask --max"))
    assert "--max-tokens" in out and "Most tokens in an answer" in out


def test_fish_options_with_help(cache: Path) -> None:
    lines = complete(cache, "fish", "specchat chat --dr")
    assert lines[0].startswith("--draft\tDraft model") and lines[1].startswith("--draft-max\t")
    assert complete(cache, "fish", "specchat chat --draft qwen2.5-coder-") == [
        "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen2.5-coder-14b", "qwen2.5-coder-32b",
        "qwen2.5-coder-7b"]


def test_show_completion_scripts_name_the_program(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    for shell, marker in (("bash", "complete -o default -F"), ("zsh", "#compdef specchat"),
                          ("fish", "complete --command specchat")):
        done = subprocess.run([sys.executable, "-m", "specchat", "--show-completion", shell],
                              env=env, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0 and "_SPECCHAT_COMPLETE" in done.stdout, done.stderr
        assert marker in done.stdout


def test_install_completion_writes_the_shell_files(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
           "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    done = subprocess.run([sys.executable, "-m", "specchat", "--install-completion", "bash"],
                          env=env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "specchat.sh"
    assert "_SPECCHAT_COMPLETE" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()


def test_version_and_help(tmp_path: Path) -> None:
    from specchat import __version__

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "specchat", "--version"], env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.stdout == f"specchat {__version__}\n"
    done = subprocess.run([sys.executable, "-m", "specchat", "--help"], env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert f"specchat {__version__}" in done.stdout and "--version" in done.stdout
    assert "--install-completion" in done.stdout
