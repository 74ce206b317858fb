"""The GPU check's parts that run without a GPU: its arguments, finding and pairing models,
the measured profile it writes, and the table of measured beside simulated costs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import gpu_costs
from specchat.bench import profiles

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "gpu_check.sh"


def run_check(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CHECK), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                               "HOME": str(tmp_path)}, timeout=60)


def test_the_script_takes_its_arguments_and_refuses_bad_ones(tmp_path: Path) -> None:
    plan = run_check("--plan", "--budget", "300", "--profile", "x", tmp_path=tmp_path)
    assert plan.returncode == 0 and "budget=300s" in plan.stdout and "profile=x" in plan.stdout
    bad = run_check("--frobnicate", tmp_path=tmp_path)
    assert bad.returncode == 2 and "unknown argument --frobnicate" in bad.stderr
    assert run_check("--budget", "soon", tmp_path=tmp_path).returncode == 2
    assert run_check("--kit", tmp_path=tmp_path).returncode != 0  # a value is missing


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_without_a_gpu_the_script_says_so_and_stops(tmp_path: Path) -> None:
    done = run_check("--budget", "30", tmp_path=tmp_path)
    assert done.returncode == 1
    assert "no NVIDIA GPU found" in done.stderr
    assert (tmp_path / "out" / "gpu-check.log").exists()  # what it did is logged


def test_models_are_found_largest_first_and_paired_within_a_family(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    for name, size in (("qwen2.5-coder-0.5b-q4.gguf", 5), ("qwen2.5-coder-1.5b-q4.gguf", 9),
                       ("a/other-7b.gguf", 20), ("notes.txt", 1)):
        (tmp_path / name).write_bytes(b"x" * size)
    found = gpu_costs.find_models([tmp_path, tmp_path / "missing"])
    assert [p.name for p in found] == ["other-7b.gguf", "qwen2.5-coder-1.5b-q4.gguf",
                                       "qwen2.5-coder-0.5b-q4.gguf"]
    target, draft = gpu_costs.pick_pair(found)
    assert target is not None and draft is not None
    assert (target.name, draft.name) == ("qwen2.5-coder-1.5b-q4.gguf",
                                         "qwen2.5-coder-0.5b-q4.gguf")
    assert gpu_costs.pick_pair(found[:1]) == (found[0], None)
    assert gpu_costs.pick_pair([]) == (None, None)


def measured(step: float, ratios: list[float], name: str = "m.gguf") -> gpu_costs.Measured:
    return gpu_costs.Measured(Path(name), tuple(step * r for r in ratios), 4000.0)


def test_the_measured_profile_reads_back_and_stands_beside_the_simulated_one() -> None:
    ratios = [1.0 + 0.04 * i for i in range(17)]
    ratios[5] = 0.98  # a noisy measurement below one step is taken as one step
    document = gpu_costs.profile_document(
        "measured-here", measured(0.005, ratios), measured(0.001, ratios, "d.gguf"), "test")
    here = profiles.parse(document, "measured")
    assert here.target.batch(1) == pytest.approx(0.005)
    assert here.target.table.ratio(6) == 1.0 and here.target.table.ratio(17) == pytest.approx(1.64)
    lines = gpu_costs.comparison(here, profiles.load("rtx3090-8b-q4_0"))
    assert lines[1].split()[:3] == ["1", "step", "5.00ms"]
    row = {int(line.split()[0]): line.split()[1:] for line in lines[2:18]}
    assert sorted(row) == list(range(2, 18))
    assert row[8] == ["1.28", "2.15"]  # here 1 + 0.04 x 7; the RTX 3090 profile 2.15
    assert lines[-2] == "draft step / target step, measured: 0.200"
    assert lines[-1].startswith("draft step / target step, simulated: 0.25")


def test_the_helper_refuses_what_it_cannot_use(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_costs.main(["--models", str(tmp_path), "--out", str(tmp_path)]) == 1
    assert "no .gguf file found" in capsys.readouterr().err
    assert gpu_costs.main(["--models", str(tmp_path), "--out", str(tmp_path / "nope")]) == 2
    assert gpu_costs.main(["--models", str(tmp_path), "--profile", "no-such"]) == 2
    assert "no such cost profile" in capsys.readouterr().err


@pytest.mark.slow
def test_a_random_weight_model_of_a_shape_loads_and_is_measured(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    path = gpu_costs.write_synthetic(tmp_path / "tiny.gguf", {
        "vocab": 400, "embd": 64, "layers": 2, "ff": 128, "heads": 4, "kv": 2})
    got = gpu_costs.measure_file(path, gpu_layers=0, repeats=1)
    assert len(got.seconds) == 17 and all(s > 0 for s in got.seconds)
    assert got.prefill_tokens_per_second > 0
    assert profiles.parse(gpu_costs.profile_document("t", got, None, "test"), "t").draft is None
