"""`specchat doctor` and backends/install.sh (no model, no GPU, no build needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.commands.doctor import Machine, suggest_profile

REPO = Path(__file__).resolve().parents[2]
LINUX = Machine("Linux", "x86_64", has_nvidia=False, has_vulkan=False)


@pytest.mark.parametrize(("built", "machine", "profile", "words"), [
    ("CPU", LINUX, "cpu", "fits this machine"),
    ("CPU", Machine("Linux", "x86_64", True, False), "cuda", "run backends/install.sh cuda"),
    ("CUDA", Machine("Linux", "x86_64", True, True), "cuda", "fits this machine"),
    ("CPU", Machine("Darwin", "arm64", False, False), "metal", "Apple silicon"),
    ("Metal", Machine("Darwin", "arm64", False, False), "metal", "fits"),
    ("CPU", Machine("Linux", "x86_64", False, True), "vulkan", "install.sh vulkan"),
    ("CUDA", LINUX, "cuda", "runs on the CPU unless a device is found"),
])
def test_profile_hint(built: str, machine: Machine, profile: str, words: str) -> None:
    got, hint = suggest_profile(built, machine)
    assert got == profile and words in hint


def test_doctor_plain_report(capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "cache"))
    main(["doctor"])  # stdout is not a TTY under pytest: plain "key: value" lines
    out, err = capsys.readouterr()
    rows = dict(line.split(": ", 1) for line in out.splitlines())
    for key in ("python", "llama-cpp-python", "llama.cpp system info", "backends",
                "gpu offload", "cache", "profile", "hint"):
        assert rows.get(key), f"no {key} row in {out!r}"
    assert rows["cache"].endswith("(not created yet)")
    assert rows["gpu offload"] in ("yes", "no")
    assert err == ""


def test_doctor_json_and_bad_models_toml(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    (tmp_path / "models.toml").write_text("[[model]\nname = \n")
    main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["models"].startswith("cannot check: ")  # reported, not a crash
    assert report["llama-cpp-python"]


@pytest.mark.parametrize(("name", "default", "file_line", "from_file"), [
    ("exact", "off: ", "exact = true", "on for targets on the CPU"),
    ("repack", "on: ", "repack = false", "off: "),
])
def test_doctor_says_what_a_kernel_option_does_and_where_that_came_from(
        name: str, default: str, file_line: str, from_file: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.delenv(f"SPECCHAT_{name.upper()}", raising=False)
    main(["doctor", "--json"])
    line = json.loads(capsys.readouterr().out)[name]
    assert line.startswith(default) and line.endswith("(default)")
    (tmp_path / "config.toml").write_text(file_line + "\n")
    main(["doctor", "--json"])
    line = json.loads(capsys.readouterr().out)[name]
    assert line.startswith(from_file) and line.endswith("(file)")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_install_script_dry_run() -> None:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(REPO / "backends" / "install.sh"), *args],
                              capture_output=True, text=True, timeout=30, check=False,
                              env={"PATH": "/usr/bin:/bin", **env})

    done = run("cuda", "--dry-run", CUDA_ARCHITECTURES="86;90")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("CMAKE_ARGS=-DGGML_CUDA=on\\ -DCMAKE_CUDA_ARCHITECTURES=86\\;90 ")
    assert "--force-reinstall --no-cache-dir --no-deps llama-cpp-python" in first
    for profile, flag in (("cpu", "GGML_NATIVE"), ("metal", "GGML_METAL"),
                          ("vulkan", "GGML_VULKAN")):
        assert flag in run(profile, "-n").stdout
    unknown = run("rocm")
    assert unknown.returncode == 2 and "profiles: cpu cuda metal vulkan" in unknown.stderr


def test_doctor_says_where_the_drafting_store_is_and_how_big(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from specchat.backend.draftstore import DraftStore

    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    monkeypatch.setenv("SPECCHAT_DRAFT_STORE_DIR", str(tmp_path / "drafts"))
    main(["doctor", "--json"])
    assert json.loads(capsys.readouterr().out)["drafting store"].startswith(
        f"{tmp_path / 'drafts'} (empty;")
    DraftStore(tmp_path / "drafts", "v" * 16, 1 << 20).append(list(range(1000)), 1)
    main(["doctor", "--json"])
    row = json.loads(capsys.readouterr().out)["drafting store"]
    assert "1 answers" in row and " MB" in row
