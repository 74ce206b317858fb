"""`exact` (llm/exact.py) wherever it is read: a runtime never verifies more rows than its
target computes bit for bit like single steps, the option reaches every process a benchmark
starts, and an exact target's costs are kept apart from a plain one's."""

from __future__ import annotations

from pathlib import Path

from specchat.backend.tuning import Calibration
from specchat.commands.bench_sessions import flags_passed_on
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.settings.file import Settings
from specchat.settings.load import LoadSettings
from specchat.settings.schema import BY_NAME
from tests.support.fake_runtime import encode, fake_model, fake_runtime

# Text that repeats: prompt lookup drafts as far as it is allowed.
REPEATS = "abcdefghij" * 12


def verify_sizes(exact_rows: int | None, temperature: float = 0.0) -> list[int]:
    target = fake_model()
    target.exact_rows = exact_rows
    runtime = fake_runtime(target)
    prompt = encode(REPEATS)
    sampling = SamplingOptions(temperature=temperature, top_k=1, seed=1)
    *_, fin = runtime.stream(prompt, GenerationOptions(max_tokens=60, spec="ngram",
                                                       draft_max=8, sampling=sampling))
    assert isinstance(fin, Finished) and fin.stats.drafted > 0
    return target.eval_calls[1:]  # the first call is the prefill


def test_an_exact_target_never_verifies_more_rows_than_it_computes_exactly() -> None:
    assert max(verify_sizes(3)) == 3


def test_negative_control_a_plain_target_verifies_longer_batches() -> None:
    assert max(verify_sizes(None)) > 3


def test_a_sampled_answer_keeps_longer_batches_its_distribution_is_exact_anyway() -> None:
    assert max(verify_sizes(3, temperature=1.0)) > 3


def test_exact_is_opt_in_and_reaches_the_load_settings() -> None:
    assert BY_NAME["exact"].default is False and LoadSettings().exact is False
    settings = Settings({"exact": True}, {"exact": "flag"})
    assert LoadSettings.from_settings(settings).exact is True


def test_a_benchmark_passes_exact_and_flash_attention_to_every_process() -> None:
    base = {"model": "m", "draft": None, "ctx": 4096, "threads": None, "n_gpu_layers": None,
            "flash_attn": "off", "repack": True}
    off = flags_passed_on(Settings({**base, "exact": False}, {}))
    on = flags_passed_on(Settings({**base, "exact": True}, {}))
    assert "--no-exact" in off and "--exact" in on and "--no-exact" not in on
    assert off[off.index("--flash-attn") + 1] == "off"


def test_an_exact_targets_costs_are_kept_apart_and_old_keys_stay(tmp_path: Path) -> None:
    cal = Calibration(LoadSettings(), path=tmp_path / "calibration.json")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert "exact" not in cal.costs_knobs(True)
    assert cal.costs_key(model, True, exact=True) != cal.costs_key(model, True)
