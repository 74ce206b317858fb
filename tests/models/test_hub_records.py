"""What a hub reference resolved to is kept for offline starts, whoever saves at the same time."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.models.hfcache import load_records, record
from specchat.models.hfref import GgufGroup, HfRef
from tests.support.together import run_together


def _record_many(who: int, n: int) -> None:
    for i in range(n):
        record(HfRef(f"org/model-{who}-{i}-GGUF", "Q4_K_M"), "c" * 40,
               GgufGroup((f"model-{who}-{i}.gguf",), 1))


def test_pulls_finishing_at_once_keep_each_others_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "cache" / "models"))
    # the processes read SPECCHAT_CACHE from the environment they start with
    assert run_together(_record_many, [(who, 40) for who in range(3)]) == [0, 0, 0]
    records = load_records()
    assert len(records) == 120
    assert records[HfRef("org/model-2-39-GGUF", "Q4_K_M").key]["files"] == ["model-2-39.gguf"]
