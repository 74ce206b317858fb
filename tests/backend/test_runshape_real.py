"""A real runtime judges every step of an answer for load (process CPU time per step), at
the share that keeps a run's prices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.backend.calibration import STEADY_SHARE, QuietSteps
from specchat.backend.loading import open_runtime
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions, Spec
from specchat.settings.load import LoadSettings

pytestmark = pytest.mark.real


def test_a_real_answers_steps_are_judged_for_load(
        real_model_path: Callable[[str], Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))  # its own calibration file
    path = real_model_path("smollm2-135m")
    settings = LoadSettings(model=str(path), spec=Spec.AUTO, n_ctx=1024, n_gpu_layers=0,
                            threads=2, quiet=True)
    options = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=48,
                                spec=Spec.AUTO)
    with open_runtime(settings) as runtime:
        steps = runtime.steps_heard
        assert isinstance(steps, QuietSteps)
        assert steps.quiet.share == STEADY_SHARE and steps.quiet.enabled
        tokens = runtime.chat_tokens([{"role": "user", "content": "Count from 1 to 30."}])
        finished = list(runtime.stream(tokens, options))[-1]
        assert isinstance(finished, Finished)
    # Every step but the first is timed from the one before; one the scheduler held up long
    # enough to look like a pause is left unjudged, so only the bounds are certain.
    assert finished.stats.steps > 10 and 0 < steps.judged <= finished.stats.steps - 1
