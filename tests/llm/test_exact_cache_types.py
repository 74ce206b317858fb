"""What an exact target's cache types must be for its promise to hold (llm/exact.py), and
that `specchat doctor` states what `--exact` costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.llm.exact import EXACT_PREFILL_COST, GGML_TYPE_BF16, GGML_TYPE_F16, kv_types

GGML_TYPE_F32 = 0  # ggml.h


def test_an_exact_cache_gives_k_and_v_types_that_reach_flash_attention_different() -> None:
    k, v = kv_types(True)
    # Equal types, or an f32 one (llama.cpp casts it to f16 before flash attention), would
    # put single steps back on the split path that no batch row takes.
    assert k != v and GGML_TYPE_F32 not in (k, v)
    assert (k, v) == (GGML_TYPE_F16, GGML_TYPE_BF16)


def test_a_plain_cache_keeps_one_type_for_the_fast_kernels() -> None:
    k, v = kv_types(False)
    assert k == v == GGML_TYPE_F16  # the tiled prefill kernel needs K and V of one type


def test_doctor_gives_the_measured_prefill_cost_of_exact(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text("exact = true\n")
    main(["doctor", "--json"])
    line = json.loads(capsys.readouterr().out)["exact"]
    assert f"(cold or after cached tokens) takes about {EXACT_PREFILL_COST:.1f}x as long " \
           "as without" in line
    assert EXACT_PREFILL_COST >= 1.0
