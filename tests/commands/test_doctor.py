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


def _calibration_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """specchat's files under tmp_path (models/ made), load settings from no environment."""
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    for name in ("THREADS", "N_GPU_LAYERS", "REPACK"):
        monkeypatch.delenv(f"SPECCHAT_{name}", raising=False)
    (tmp_path / "models").mkdir()


def test_doctor_shows_the_calibrations_in_force_and_counts_the_rest(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from specchat.backend import calibrationfile
    from specchat.backend.calibrationfile import machine_key, origin
    from specchat.backend.tuning import Calibration
    from specchat.settings.load import LoadSettings

    _calibration_home(monkeypatch, tmp_path)
    labelled, unlabelled = tmp_path / "models" / "a.gguf", tmp_path / "models" / "b.gguf"
    labelled.write_bytes(b"GGUF a")
    unlabelled.write_bytes(b"GGUF b")
    (tmp_path / "x.gguf").write_bytes(b"GGUF x")
    plain = Calibration(LoadSettings()).costs_knobs(False)
    exact = Calibration(LoadSettings()).costs_knobs(True, exact=True)

    def entry(name: str, step: float, **more: object) -> dict[str, object]:
        return {"seconds": [step, 2 * step], "model": name, "samples": {}, **more}

    entries = {
        machine_key(labelled, plain): entry("a.gguf", 0.03, **origin(labelled, plain, (1, 2))),
        machine_key(labelled, exact): entry("a.gguf", 0.04, **origin(labelled, exact, (1, 2))),
        machine_key(unlabelled, plain): entry("b.gguf", 0.05),  # written before origins
        # a path in the file is stat'ed, never a directory taken from a bare model name
        machine_key(tmp_path / "x.gguf", plain): entry("../x.gguf", 0.06),
    }
    monkeypatch.setattr(calibrationfile, "_this_cpu", lambda: "cpu family\t: 26")
    entries[machine_key(labelled, plain) + "-old"] = entry(
        "a.gguf", 0.07, **origin(labelled, plain, (1, 2)))  # key of another CPU
    monkeypatch.undo()
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    (tmp_path / "calibration.json").write_text(json.dumps(entries))

    main(["doctor", "--json"])
    rows = json.loads(capsys.readouterr().out)
    shown = {k: v for k, v in rows.items()
             if k.startswith("calibration ") and k != "calibration elsewhere"}
    assert shown.keys() == {"calibration a.gguf (default threads, flash attention off)",
                            "calibration a.gguf (default threads, flash attention on, --exact)",
                            "calibration b.gguf (default threads, flash attention off)"}
    assert shown["calibration b.gguf (default threads, flash attention off)"].startswith(
        "step 50.0 ms; batch cost x step 2:2.00")
    assert rows["calibration elsewhere"].startswith("2 more in")


def test_doctor_shows_the_batch_prices_runs_settled(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from specchat.backend.calibrationfile import machine_key, origin
    from specchat.backend.tuning import Calibration
    from specchat.settings.load import LoadSettings

    _calibration_home(monkeypatch, tmp_path)
    model = tmp_path / "models" / "a.gguf"
    model.write_bytes(b"GGUF a")
    knobs = Calibration(LoadSettings()).costs_knobs(False)
    # Calibrated at 2 steps for a batch of 2; three runs saw 1.5.
    entry = {"seconds": [0.03, 0.06], "model": "a.gguf", **origin(model, knobs, (1, 2)),
             "samples": {"1": [0.03, 3, 3], "2": [0.06, 3, 3]},
             "runs": {"2": [1.5, 1.5, 1.5]}}
    (tmp_path / "calibration.json").write_text(json.dumps({machine_key(model, knobs): entry}))
    main(["doctor", "--json"])
    row = json.loads(capsys.readouterr().out)[
        "calibration a.gguf (default threads, flash attention off)"]
    assert row.startswith("step 30.0 ms; batch cost x step 2:1.50")
    assert row.endswith("; 2/2 sizes final; runs settled 1 of its sizes")


def test_a_kernel_probe_that_fails_is_named_for_every_option_it_covers(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from specchat.backend import flashattn

    def broken(*args: object) -> list[tuple[str, str]]:
        raise ValueError("unreadable measurement")

    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    monkeypatch.setattr(flashattn, "describe", broken)
    main(["doctor", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rows["kernels (flash attention, exact, repack)"] == \
        "cannot check: unreadable measurement"
    assert "exact" not in rows and "repack" not in rows
