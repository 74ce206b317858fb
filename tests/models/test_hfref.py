"""Parsing hub references and choosing a GGUF file from a listing (pure)."""

from __future__ import annotations

import pytest

from specchat.errors import UsageError
from specchat.models.hfref import (
    HfRef,
    choose,
    group_files,
    matches,
    parse_ref,
    quant_label,
)
from specchat.models.resolve import hub_ref_or_none


@pytest.mark.parametrize(("spec", "ref"), [
    ("Qwen/Qwen2.5-7B-Instruct-GGUF", HfRef("Qwen/Qwen2.5-7B-Instruct-GGUF")),
    ("Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m", HfRef("Qwen/Qwen2.5-7B-Instruct-GGUF", "q4_k_m")),
    ("hf.co/bartowski/Foo-GGUF:Q8_0", HfRef("bartowski/Foo-GGUF", "Q8_0")),
    ("https://huggingface.co/owner/name", HfRef("owner/name")),
    ("https://huggingface.co/owner/name/", HfRef("owner/name")),
    ("https://huggingface.co/owner/name/blob/main/x-Q8_0.gguf",
     HfRef("owner/name", "x-Q8_0.gguf")),
    ("https://huggingface.co/owner/name/tree/v2", HfRef("owner/name", None, "v2")),
])
def test_parse_ref(spec: str, ref: HfRef) -> None:
    assert parse_ref(spec) == ref


@pytest.mark.parametrize("spec", ["qwen", "a/b/c", "/abs/path", "a b/c", "owner/name:"])
def test_not_a_ref(spec: str) -> None:
    assert parse_ref(spec) is None


def test_paths_presets_and_refs_are_told_apart(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    assert hub_ref_or_none("smollm2-135m") is None  # a preset
    assert hub_ref_or_none("owner/name") == HfRef("owner/name")
    assert hub_ref_or_none("./owner/name") is None  # ./ forces a path
    assert hub_ref_or_none("owner/name.gguf") is None
    assert hub_ref_or_none("owner/name:file-Q8_0.gguf") == HfRef("owner/name", "file-Q8_0.gguf")
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "name").write_bytes(b"GGUF")
    assert hub_ref_or_none("owner/name") is None  # an existing path wins
    assert hub_ref_or_none("hf.co/owner/name") == HfRef("owner/name")  # unless forced
    with pytest.raises(UsageError):
        hub_ref_or_none("hf.co/not a repo")


LISTING = {
    "m-Q4_K.gguf": 10, "m-Q4_K_M.gguf": 12, "m-IQ4_XS.gguf": 9, "mmproj-m-f16.gguf": 1,
    "m-q8_0-00001-of-00002.gguf": 20, "m-q8_0-00002-of-00002.gguf": 20,
    "m-f16-00001-of-00003.gguf": 5,  # an incomplete split: not loadable
    "README.md": 1,
}


def test_groups_join_splits_and_drop_incomplete_ones_and_projectors() -> None:
    groups = group_files(LISTING)
    assert [g.files for g in groups] == [
        ("m-IQ4_XS.gguf",), ("m-Q4_K.gguf",), ("m-Q4_K_M.gguf",),
        ("m-q8_0-00001-of-00002.gguf", "m-q8_0-00002-of-00002.gguf")]
    assert [quant_label(g) for g in groups] == ["IQ4_XS", "Q4_K", "Q4_K_M", "Q8_0"]
    assert groups[3].size == 40


def test_quant_matches_whole_tokens_only() -> None:
    groups = {g.first: g for g in group_files(LISTING)}
    assert matches(groups["m-Q4_K_M.gguf"], "q4_k_m")
    assert not matches(groups["m-Q4_K_M.gguf"], "Q4_K")
    assert not matches(groups["m-IQ4_XS.gguf"], "Q4_XS")
    assert matches(groups["m-Q4_K.gguf"], "m-q4_k.gguf")


def test_choose_default_then_smallest() -> None:
    groups = group_files(LISTING)
    assert choose(groups, HfRef("o/n"), "the repo").first == "m-Q4_K_M.gguf"
    without = [g for g in groups if g.first != "m-Q4_K_M.gguf"]
    assert choose(without, HfRef("o/n"), "the repo").first == "m-IQ4_XS.gguf"
    assert choose(groups, HfRef("o/n", "Q8_0"), "the repo").files[1].endswith("00002.gguf")
    with pytest.raises(UsageError, match="it has IQ4_XS, Q4_K, Q4_K_M, Q8_0"):
        choose(groups, HfRef("o/n", "Q6_K"), "the repo")
