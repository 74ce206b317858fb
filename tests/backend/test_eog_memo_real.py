"""A model's end-of-generation ids are found once per file (a question to llama.cpp about
every id) and read from the headers memo at later starts; a memo that cannot be trusted for
the file is never used."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.backend import loading
from specchat.backend.loading import open_runtime
from specchat.llm import lib
from specchat.models.headers import Headers
from specchat.settings.load import LoadSettings

pytestmark = pytest.mark.real


def _settings(path: Path) -> LoadSettings:
    return LoadSettings(model=str(path), spec="off", n_ctx=512, n_gpu_layers=0, quiet=True)


def test_a_second_start_takes_the_ids_from_the_memo_and_they_are_the_scanned_ones(
        real_model_path: Callable[[str], Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = real_model_path("smollm2-135m")
    memo = tmp_path / "headers.json"
    monkeypatch.setattr(loading, "Headers", lambda: Headers(memo))
    scans: list[int] = []

    def counted(vocab: object) -> frozenset[int]:
        scans.append(1)
        return lib.eog_tokens(vocab)

    monkeypatch.setattr("specchat.llm.modeltext.eog_tokens", counted)
    with open_runtime(_settings(path)) as first:
        scanned = first.target.eog_tokens
    assert scanned and len(scans) == 1
    assert Headers(memo).eog(path.resolve(), 49152) == scanned
    with open_runtime(_settings(path)) as second:
        assert second.target.eog_tokens == scanned
    assert len(scans) == 1  # the second start asked llama.cpp about no id


def test_ids_outside_the_vocabulary_are_not_taken(
        real_model_path: Callable[[str], Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = real_model_path("smollm2-135m")
    memo = Headers(tmp_path / "headers.json")
    memo.remember_eog(path.resolve(), frozenset({2, 10**6}))
    memo.save()
    monkeypatch.setattr(loading, "Headers", lambda: Headers(tmp_path / "headers.json"))
    with open_runtime(_settings(path)) as runtime:
        found = runtime.target.eog_tokens
    assert 10**6 not in found and found
    assert Headers(tmp_path / "headers.json").eog(path.resolve(), 49152) == found
