"""Models other tools keep, through the real CLI: trees laid out as ollama, LM Studio and
llama.cpp lay them out, holding real GGUF files, listed by `models --local`, answered from in
place, and a draft found among them."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.clirun import run_cli
from tests.support.modeltrees import link_or_copy, ollama_model


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("smollm2-135m")


@pytest.fixture(scope="module")
def smol_f32(smol: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 at full precision (5.5x the Q4_1 file): a target its Q4_1 can draft for."""
    import llama_cpp

    out = tmp_path_factory.mktemp("f32") / "SmolLM2-135M-Instruct-F32.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    rc = llama_cpp.llama_model_quantize(str(smol).encode(), str(out).encode(),
                                        ctypes.byref(params))
    assert rc == 0
    return out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_models_local_lists_every_tools_models_and_their_drafts(
        trees: dict[str, Path], smol: Path, smol_f32: Path,
        real_model_path: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    gemma = real_model_path("gemma3-270m")
    ollama_model(trees["ollama"], "smollm2", "135m", smol)
    link_or_copy(smol_f32, trees["lmstudio"] / "someone" / "SmolLM2-GGUF" / smol_f32.name)
    link_or_copy(gemma, trees["llama"] / f"someone_gemma-GGUF_{gemma.name}")
    before = {k: snapshot(trees[k]) for k in ("ollama", "lmstudio", "llama")}

    code, out, err = run_cli(["models", "--local", "--json"], capsys)

    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["models"]}
    target = rows["lmstudio:someone/SmolLM2-GGUF:F32"]
    assert (target["source"], target["arch"], target["quant"]) == ("lmstudio", "llama", "ALL_F32")
    assert target["drafts"] == ["ollama:smollm2:135m"]  # same vocabulary, a fifth the size
    assert target["draft_found"] == "ollama:smollm2:135m"
    draft = rows["ollama:smollm2:135m"]
    assert (draft["arch"], draft["quant"], draft["size"]) == ("llama", "Q4_1",
                                                              smol.stat().st_size)
    gemma_row = rows[f"llamacpp:someone_gemma-GGUF_{gemma.name}"]
    assert gemma_row["arch"] == "gemma3" and gemma_row["drafts"] == []
    assert {k: snapshot(trees[k]) for k in before} == before  # read in place, nothing written

    code, out, _ = run_cli(["models", "--local"], capsys)
    assert code == 0
    line = next(ln for ln in out.splitlines() if "lmstudio:someone/SmolLM2-GGUF:F32" in ln)
    assert line.split()[:2] == ["lmstudio", "lmstudio:someone/SmolLM2-GGUF:F32"]
    assert line.rstrip().endswith("ollama:smollm2:135m*")


def test_an_ollama_model_answers_from_its_blob_without_a_copy(
        trees: dict[str, Path], smol: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ollama_model(trees["ollama"], "smollm2", "135m", smol)
    ollama_model(trees["ollama"], "smollm2", "latest", smol, namespace="someone")
    before = snapshot(trees["ollama"])
    args = ["-n", "6", "-t", "0", "--spec", "off", "--json"]

    code, out, err = run_cli(["ask", "-m", "ollama:smollm2:135m", "Say hi", *args], capsys)
    assert code == 0, err
    answer = json.loads(out)
    code, out, err = run_cli(["ask", "-m", str(smol), "Say hi", *args], capsys)
    assert code == 0, err
    assert json.loads(out)["text"] == answer["text"]  # the same file, the same answer
    assert answer["model"] == "ollama:smollm2:135m"

    # user/model with no tag means :latest, in that namespace
    code, out, err = run_cli(["ask", "-m", "ollama:someone/smollm2", "Say hi", *args], capsys)
    assert code == 0, err
    assert snapshot(trees["ollama"]) == before
    assert not [p for p in trees["specchat"].rglob("*") if p.suffix == ".gguf"]


def test_a_draft_is_found_when_none_is_named(
        trees: dict[str, Path], smol: Path, smol_f32: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ollama_model(trees["ollama"], "smollm2", "135m", smol)
    link_or_copy(smol_f32, trees["lmstudio"] / "someone" / "SmolLM2-GGUF" / smol_f32.name)
    args = ["-m", "lmstudio:someone/SmolLM2-GGUF", "Say hi", "-n", "6", "-t", "0", "--json"]

    code, out, err = run_cli(["ask", *args, "--spec", "draft"], capsys)
    assert code == 0, err
    found = json.loads(out)
    assert (found["draft"], found["draft_found"]) == ("ollama:smollm2:135m", True)
    assert found["stats"]["drafted"] > 0

    code, out, err = run_cli(["ask", *args[:-1], "--spec", "draft"], capsys)
    assert code == 0, err
    assert out.rstrip("\n") == found["text"].rstrip("\n")
    assert "specchat: draft ollama:smollm2:135m found on this machine" in err

    code, out, err = run_cli(["ask", *args, "--spec", "auto", "--draft", "none"], capsys)
    assert code == 0, err
    plain = json.loads(out)
    assert (plain["draft"], plain["draft_found"]) == (None, False)
    assert plain["text"] == found["text"]

    monkeypatch.setenv("SPECCHAT_MODEL", "lmstudio:someone/SmolLM2-GGUF")
    report = json.loads(run_cli(["doctor", "--json"], capsys)[1])
    assert report["local models"].startswith("1 ollama, 1 lmstudio")
    assert report["draft model"] == ("ollama:smollm2:135m for lmstudio:someone/SmolLM2-GGUF, "
                                     "found on this machine (--draft none turns it off)")


def test_a_search_reads_each_header_once_and_then_none(
        trees: dict[str, Path], smol: Path, smol_f32: Path) -> None:
    from specchat.models.headers import Headers
    from specchat.models.pairing import find_draft

    for i in range(4):
        ollama_model(trees["ollama"], f"m{i}", "latest", smol)
    target = link_or_copy(smol_f32, trees["lmstudio"] / "p" / "r" / smol_f32.name)
    cold = find_draft(target, budget=0.0)  # the first candidate is read whatever the budget
    assert cold.model is not None and cold.unchecked == 3
    while cold.unchecked:
        cold = find_draft(target, budget=0.0)
    headers = Headers()
    warm = find_draft(target, headers=headers)
    assert (warm.model, warm.unchecked, headers.read_seconds) == (cold.model, 0, 0.0)


def test_drafts_for_judges_the_other_tools_models(
        trees: dict[str, Path], smol: Path, smol_f32: Path,
        real_model_path: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    gemma = real_model_path("gemma3-270m")
    ollama_model(trees["ollama"], "smollm2", "135m", smol)
    link_or_copy(gemma, trees["llama"] / f"o_r_{gemma.name}")
    code, out, err = run_cli(["models", "--drafts-for", str(smol_f32), "--json"], capsys)
    assert code == 0, err
    verdicts = {c["name"]: (c["can_draft"], c["reason"]) for c in json.loads(out)["candidates"]}
    assert verdicts["ollama:smollm2:135m"][0] is True
    assert verdicts[f"llamacpp:o_r_{gemma.name}"][0] is False
    assert "tokenizer type bpe vs spm" in verdicts[f"llamacpp:o_r_{gemma.name}"][1]
