"""GPU fit arithmetic on made-up devices (the only way to test the GPU path on a CPU machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import UsageError
from specchat.llm import gpufit
from specchat.llm.gpufit import Device, ModelShape, plan, shape_from_metadata

GIB = 1 << 30
MIB = 1 << 20

# Qwen2.5-7B-Instruct Q4_K_M and Qwen2.5-0.5B-Instruct Q4_K_M as their GGUF metadata describes
# them (28 / 24 layers, 4 / 2 KV heads of 128 / 64), file sizes rounded.
QWEN_7B = ModelShape("7b", 4_680_000_000, n_layer=28, n_ctx_train=32768, n_embd=3584,
                     n_embd_k_gqa=512, n_embd_v_gqa=512, n_vocab=152064)
QWEN_05B = ModelShape("0.5b", 490_000_000, n_layer=24, n_ctx_train=32768, n_embd=896,
                      n_embd_k_gqa=128, n_embd_v_gqa=128, n_vocab=151936)


def _full(shape: ModelShape, n_ctx: int, n_batch: int = 512) -> int:
    """The documented estimate, written out independently of the module's helpers."""
    kv = 2 * n_ctx * (shape.n_embd_k_gqa + shape.n_embd_v_gqa) * shape.n_layer
    compute = 4 * n_batch * (shape.n_vocab + 4 * shape.n_embd)
    return shape.file_bytes + kv + compute


def test_big_card_holds_both_entirely_and_says_nothing() -> None:
    fit = plan([Device("card", 22 * GIB, 24 * GIB)], QWEN_7B, QWEN_05B, n_ctx=4096)
    assert (fit.target.n_gpu_layers, fit.draft.n_gpu_layers) == (-1, -1)  # type: ignore[union-attr]
    assert fit.target.bytes == pytest.approx(_full(QWEN_7B, 4096), abs=2)
    assert fit.shortfall() is None
    assert fit.summary() == ("GPU layers: 7b all 29 layers (4.9 GiB); 0.5b all 25 layers "
                             "(0.8 GiB); 22.0 GiB free on card")


def test_target_first_then_the_draft_gets_what_is_left() -> None:
    free = _full(QWEN_7B, 4096) + 512 * MIB + 100 * MIB  # the 7B and a little more
    fit = plan([Device("card", free, 6 * GIB)], QWEN_7B, QWEN_05B, n_ctx=4096)
    assert fit.target.complete
    assert fit.draft is not None and fit.draft.layers == 0  # 100 MiB < its compute buffer
    line = fit.shortfall()
    assert line is not None and "\n" not in line
    assert line.startswith("GPU layers: 7b all 29 layers (4.9 GiB); 0.5b 0 of 25 layers")
    assert line.endswith("the rest runs on the CPU (a smaller --ctx or quantization fits more; "
                         "--n-gpu-layers N overrides)")


def test_partial_target_gets_whole_layers_within_the_budget() -> None:
    device = Device("small", 3 * GIB, 4 * GIB)
    fit = plan([device], QWEN_7B, None, n_ctx=4096)
    budget = 3 * GIB - 512 * MIB
    per_layer = QWEN_7B.file_bytes / 29 + 2 * 4096 * 1024
    compute = 4 * 512 * (152064 + 4 * 3584)
    assert fit.target.layers == int((budget - compute) // per_layer) == 13
    assert fit.target.bytes <= budget
    assert fit.target.n_gpu_layers == 13 and fit.draft is None


def test_longer_context_takes_layers_away() -> None:
    device = [Device("small", 6 * GIB, 8 * GIB)]
    short = plan(device, QWEN_7B, None, n_ctx=4096).target
    long = plan(device, QWEN_7B, None, n_ctx=32768).target
    assert short.complete and not long.complete and long.layers > 0


def test_margin_is_the_larger_of_512_mib_and_5_percent_per_device() -> None:
    assert gpufit.margin((Device("a", 0, 4 * GIB),)) == 512 * MIB
    assert gpufit.margin((Device("a", 0, 80 * GIB), Device("b", 0, 4 * GIB))) == \
        int(80 * GIB * 0.05) + 512 * MIB


def test_nothing_free_means_no_layers() -> None:
    fit = plan([Device("busy", 100 * MIB, 8 * GIB)], QWEN_7B, QWEN_05B, n_ctx=4096)
    assert (fit.target.n_gpu_layers, fit.draft.n_gpu_layers) == (0, 0)  # type: ignore[union-attr]
    assert fit.target.bytes == 0


def test_shape_from_metadata_defaults_like_llama_cpp() -> None:
    meta = {"general.architecture": "llama", "llama.block_count": "30",
            "llama.context_length": "8192", "llama.embedding_length": "576",
            "llama.attention.head_count": "9", "llama.attention.head_count_kv": "3"}
    shape = shape_from_metadata("smol", meta, 49152, 1000)
    assert (shape.n_layer, shape.n_ctx_train, shape.n_embd_k_gqa, shape.n_embd_v_gqa) == \
        (30, 8192, 192, 192)


def test_auto_reaches_the_runtime_as_none_and_ctx_zero_is_accepted() -> None:
    """The runtime sizes layers when n_gpu_layers is None; the option schema must say so."""
    from specchat.settings.schema import lookup

    assert lookup("n_gpu_layers").from_text("auto") is None
    assert lookup("n_gpu_layers").from_text("12") == 12
    assert lookup("ctx").from_text("0") == 0


@pytest.mark.real
def test_auto_on_a_cpu_build_is_zero_and_silent(real_model_path: object,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from specchat.backend.gpu import gpu_layers
    from specchat.llm import gpu_offload_supported
    from specchat.settings.load import LoadSettings

    if gpu_offload_supported():
        pytest.skip("this llama.cpp build offloads to a GPU")
    smol = Path(real_model_path("smollm2-135m"))  # type: ignore[operator]
    assert gpu_layers(LoadSettings(verbose=True), smol, smol) == ((0, 0), None)
    assert capsys.readouterr().err == ""


@pytest.mark.real
def test_auto_with_a_made_up_small_gpu_says_one_line(real_model_path: object,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The real metadata path with a pretend device: 700 MiB free, the 1.5B does not fit."""
    from specchat.backend.gpu import gpu_layers
    from specchat.llm import files, lib
    from specchat.settings.load import LoadSettings

    monkeypatch.setattr(lib, "gpu_offload_supported", lambda: True)
    monkeypatch.setattr(files, "gpu_devices", lambda: [Device("Fake GPU", 1200 * MIB, 2 * GIB)])
    target = Path(real_model_path("qwen2.5-coder-1.5b"))  # type: ignore[operator]
    draft = Path(real_model_path("qwen2.5-coder-0.5b"))  # type: ignore[operator]
    (t, d), fit = gpu_layers(LoadSettings(n_ctx=0), target, draft)
    assert fit is not None and fit.target.slots == 29 and 0 < t < 29 and d == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"specchat: GPU layers: {target.name} {t} of 29 layers")
    assert "1.2 GiB free on Fake GPU" in err[0]


@pytest.mark.real
def test_doctor_says_what_auto_chooses(real_model_path: object,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.commands.doctor import collect
    from specchat.llm import files, lib

    real_model_path("qwen2.5-coder-1.5b")  # type: ignore[operator]
    monkeypatch.setattr(lib, "gpu_offload_supported", lambda: True)
    monkeypatch.setattr(files, "gpu_devices", lambda: [Device("Fake GPU", 20 * GIB, 24 * GIB)])
    rows = dict(collect()[0])
    assert rows["gpu fit"].startswith("qwen2.5-coder-1.5b at --ctx 4096: GPU layers: "
                                      "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf all 29 layers")


@pytest.mark.real
def test_ctx_zero_is_the_trained_context_and_more_is_refused(real_model_path: object) -> None:
    from specchat.llm import load_model

    smol = Path(real_model_path("smollm2-135m"))  # type: ignore[operator]
    with load_model(smol, n_ctx=0) as model:
        assert model.n_ctx == 8192  # SmolLM2's llama.context_length
    with pytest.raises(UsageError) as info:
        load_model(smol, n_ctx=8193)
    assert str(info.value) == ("--ctx 8193 is more than SmolLM2-135M-Instruct.Q4_1.gguf was "
                               "trained for (8192 tokens); use --ctx 8192 or less (0 means 8192)")
    assert info.value.exit_code == 2
