"""Other tools' model folders as hostile input, names, vocabulary prints and the draft rule:
small GGUF files written with the `gguf` package, no model loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from specchat.llm.vocab import VocabInfo, compatibility_problems, prints_compatible, vocab_print
from specchat.models import local
from specchat.models.pairing import MAX_DRAFT_SHARE, can_pay
from tests.support.clirun import run_cli
from tests.support.modeltrees import ollama_model


def tiny_gguf(path: Path, n_tokens: int = 8) -> Path:
    """A GGUF file with a header and a vocabulary and no tensors: enough to be found."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(n_tokens)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


def ask(name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, out, err = run_cli(["ask", "-m", name, "hi", "-n", "1", "--spec", "off"], capsys)
    assert out == ""
    return code, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_manifest_naming_a_blob_out_of_the_tree_is_refused(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tiny_gguf(trees["outside"] / "x.gguf")
    ollama_model(trees["ollama"], "evil", "latest", None, digest="sha256:../../outside/x.gguf")
    code, err = ask("ollama:evil", capsys)
    assert code == 2
    assert "not a sha256 digest; refused" in one_line(err)


def test_a_blob_linked_out_of_the_tree_is_refused(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    target = tiny_gguf(trees["outside"] / "x.gguf")
    manifest = ollama_model(trees["ollama"], "linked", "1b", None)
    digest = json.loads(manifest.read_text())["layers"][1]["digest"].split(":")[1]
    (trees["ollama"] / "blobs").mkdir()
    (trees["ollama"] / "blobs" / f"sha256-{digest}").symlink_to(target)
    code, err = ask("ollama:linked:1b", capsys)
    assert code == 2
    assert f"leads out of {trees['ollama']}" in one_line(err)


def test_an_lmstudio_file_linked_out_of_the_tree_is_refused(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    target = tiny_gguf(trees["outside"] / "m-Q4_K_M.gguf")
    repo = trees["lmstudio"] / "pub" / "repo"
    repo.mkdir(parents=True)
    (repo / "m-Q4_K_M.gguf").symlink_to(target)
    code, err = ask("lmstudio:pub/repo", capsys)
    assert code == 2
    assert "leads out of" in one_line(err)


def test_a_blob_that_is_not_gguf_is_refused_naming_it(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    fake = trees["outside"] / "weights.safetensors"
    header = b'{"a":{}}'
    fake.write_bytes(len(header).to_bytes(8, "little") + header)
    ollama_model(trees["ollama"], "safe", "latest", fake)
    code, err = ask("ollama:safe", capsys)
    assert code == 2
    line = one_line(err)
    assert "ollama model safe:latest" in line and "not a GGUF file (it looks like safetensors)" \
        in line


def test_a_fifo_blob_is_refused_without_waiting(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    manifest = ollama_model(trees["ollama"], "pipe", "latest", None)
    digest = json.loads(manifest.read_text())["layers"][1]["digest"].split(":")[1]
    (trees["ollama"] / "blobs").mkdir()
    os.mkfifo(trees["ollama"] / "blobs" / f"sha256-{digest}")
    code, err = ask("ollama:pipe", capsys)
    assert code == 2
    assert "is a FIFO, not a model file" in one_line(err)


def test_a_huge_manifest_is_refused_unread(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    manifest = trees["ollama"] / "manifests" / "registry.test" / "library" / "huge" / "latest"
    manifest.parent.mkdir(parents=True)
    with manifest.open("wb") as handle:
        handle.truncate(5 << 30)  # sparse: 5 GB that were never written
    code, err = ask("ollama:huge", capsys)
    assert code == 2
    assert "is too large" in one_line(err)


def test_a_manifest_without_a_model_layer_is_refused(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    ollama_model(trees["ollama"], "vision", "latest", tiny_gguf(trees["outside"] / "p.gguf"),
                 media="application/vnd.ollama.image.projector")
    code, err = ask("ollama:vision", capsys)
    assert code == 2
    assert "has no model layer" in one_line(err)


@pytest.mark.parametrize("text", ['{"layers": 5}', '[1, 2]', '{"layers": "abc"}', "\u0000{",
                                  '{"layers": [{"mediaType": "application/vnd.ollama.image.model"'
                                  ', "digest": 7}]}'])
def test_a_malformed_manifest_is_refused_in_one_line(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str) -> None:
    manifest = trees["ollama"] / "manifests" / "registry.test" / "library" / "bad" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(text)
    code, err = ask("ollama:bad", capsys)
    assert code == 2
    assert "ollama model bad:latest: manifest" in one_line(err)


def test_names_that_are_not_names_are_refused(trees: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("ollama:../x", "ollama:a/b/c/d", "lmstudio:../../etc", "llamacpp:../x.gguf",
                 "ollama:", "lmstudio:pub/repo:../x"):
        code, err = ask(name, capsys)
        assert code == 2, name
        assert one_line(err).startswith("specchat: error:"), name


def test_models_local_lists_good_entries_and_one_line_per_bad_one(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    good = tiny_gguf(trees["outside"] / "good.gguf")
    ollama_model(trees["ollama"], "good", "latest", good)
    ollama_model(trees["ollama"], "evil", "latest", None, digest="sha256:../../x")
    tiny_gguf(trees["llama"] / "owner_repo_model-Q8_0.gguf")
    (trees["llama"] / "owner_repo_model-Q8_0.gguf.json").write_text("{}")
    (trees["llama"] / "owner_repo_other-Q4_0.gguf.downloadInProgress").write_bytes(b"GGUF")
    code, out, err = run_cli(["models", "--local", "--json"], capsys)
    assert code == 0
    names = [r["name"] for r in json.loads(out)["models"]]
    assert names == ["ollama:good:latest", "llamacpp:owner_repo_model-Q8_0.gguf"]
    skipped = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(skipped) == 1 and "ollama model evil:latest" in skipped[0]


def test_local_names_resolve_in_place(trees: dict[str, Path]) -> None:
    blob_of = tiny_gguf(trees["outside"] / "m.gguf")
    ollama_model(trees["ollama"], "m", "7b", blob_of, namespace="user")
    repo = trees["lmstudio"] / "pub" / "repo"
    q4 = tiny_gguf(repo / "m-Q4_K_M.gguf")
    q8 = tiny_gguf(repo / "m-Q8_0.gguf")
    cached = tiny_gguf(trees["llama"] / "o_r_m-Q5_K_M.gguf")
    assert local.resolve_local("ollama:user/m:7b").parent == trees["ollama"] / "blobs"
    assert local.resolve_local("ollama:registry.test/user/m:7b").parent.name == "blobs"
    assert local.resolve_local("lmstudio:pub/repo") == q4  # Q4_K_M when none is named
    assert local.resolve_local("lmstudio:pub/repo:Q8_0") == q8
    assert local.resolve_local("lmstudio:pub/repo:m-Q8_0.gguf") == q8
    assert local.resolve_local("llamacpp:o_r_m-Q5_K_M") == cached
    assert local.resolve_local("llamacpp:Q5_K_M") == cached


def test_completion_offers_local_names(trees: dict[str, Path]) -> None:
    from specchat.models.complete import model_candidates

    ollama_model(trees["ollama"], "m", "7b", tiny_gguf(trees["outside"] / "m.gguf"))
    assert model_candidates("oll") == ["ollama:m:7b"]
    assert "ollama:m:7b" not in model_candidates("qwen")


def vocab(texts: list[bytes], types: list[int] | None = None, eos: int = 1) -> VocabInfo:
    return VocabInfo(name="v", vocab_type="bpe", n_tokens=len(texts),
                     specials={"bos": 0, "eos": eos}, add_bos=False, add_eos=False,
                     eog=frozenset({eos}), texts=texts,
                     types=np.asarray(types if types is not None else [4] * len(texts)))


def test_prints_follow_the_compatibility_rule() -> None:
    base = [f"tok{i}".encode() for i in range(500)]
    cases = [
        (base, base + [b"[PAD]"] * 64),  # padded within the limit
        (base, base + [b"[PAD]"] * 129),  # padded beyond it
        (base, base[:-1] + [b"other"]),  # one text differs
        (base, base[:499]),  # one id fewer
    ]
    for a, b in cases:
        va, vb = vocab(a), vocab(b)
        want = not compatibility_problems(va, vb)
        assert prints_compatible(vocab_print(va), vocab_print(vb)) is want
        assert prints_compatible(vocab_print(vb), vocab_print(va)) is want
    kinds = vocab(base, [4] * 499 + [8])
    assert not prints_compatible(vocab_print(vocab(base)), vocab_print(kinds))
    assert not prints_compatible(vocab_print(vocab(base)), vocab_print(vocab(base, eos=2)))


def test_a_draft_pays_only_when_much_smaller() -> None:
    assert can_pay(1000, 100)
    assert not can_pay(1000, int(1000 * MAX_DRAFT_SHARE) + 1)
    assert not can_pay(1000, 0)


def test_pulling_a_local_name_says_it_runs_in_place(trees: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["pull", "qwen2.5-0.5b", "ollama:qwen2.5:7b"], capsys)
    assert (code, out) == (2, "")
    assert "runs it in place (-m ollama:qwen2.5:7b), there is nothing to pull" in one_line(err)


@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_a_blob_that_is_a_folder_or_missing_is_refused_in_one_line(
        trees: dict[str, Path], capsys: pytest.CaptureFixture[str], kind: str) -> None:
    manifest = ollama_model(trees["ollama"], "gone", "latest", None)
    digest = json.loads(manifest.read_text())["layers"][1]["digest"].split(":")[1]
    (trees["ollama"] / "blobs").mkdir()
    if kind == "directory":
        (trees["ollama"] / "blobs" / f"sha256-{digest}").mkdir()
    code, err = ask("ollama:gone", capsys)
    assert code == 2
    line = one_line(err)
    assert "ollama model gone:latest" in line
    if kind == "directory":
        assert "is a directory, not a model file" in line
    else:
        assert f"cannot read {trees['ollama'] / 'blobs'}" in line and "no such file" in line
