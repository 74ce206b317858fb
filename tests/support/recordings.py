"""Synthetic recordings and cost profiles for priced replays: a few dozen token ids (a code
edit that copies its prompt, free prose) and GPU- and CPU-shaped machines, so every figure a
replay gives is deterministic and can be checked by hand."""

from __future__ import annotations

from typing import Any

from specchat.bench import profiles
from specchat.bench import recording as rec

EOG = 99


def gpu_profile(draft_ratio: float = 0.1, overhead: float = 0.0) -> profiles.CostProfile:
    """A GPU-shaped machine: a batch of n costs 1 + 0.05 (n - 1) steps; a cheap draft."""
    return profiles.parse(profile_json(
        [1.0 + 0.05 * i for i in range(17)], draft_ratio, overhead), "gpu")


def cpu_profile() -> profiles.CostProfile:
    """A CPU-shaped machine: every extra token in a batch costs most of a step, and a draft
    step half a target step (the 2-core machines this is developed on)."""
    return profiles.parse(profile_json(
        [1.0 + 0.7 * i for i in range(17)], 0.53, 0.0), "cpu")


def profile_json(ratios: list[float], draft_ratio: float, overhead: float) -> dict[str, Any]:
    step = 0.01
    return {"format": profiles.FORMAT, "version": 1, "name": "synthetic", "source": "test",
            "target": {"model": "t", "step_seconds": step, "batch_ratios": ratios,
                       "prefill_tokens_per_second": 2000},
            "draft": {"model": "d", "step_seconds": step * draft_ratio,
                      "batch_ratios": [1.0, 1.02, 1.04, 1.06],
                      "prefill_tokens_per_second": 20000},
            "overhead_seconds": overhead}


def recorded(qid: str, category: str, prompt: list[int], answer: list[int],
             draft: list[int], sure: list[float] | None = None) -> rec.Recorded:
    return rec.Recorded(qid, category, tuple(prompt), tuple(answer), "eog", tuple(draft),
                        tuple(sure or [0.9] * len(draft)))


def recording(*items: rec.Recorded, max_tokens: int = 64) -> rec.Recording:
    return rec.Recording("target.gguf", "draft.gguf", "test", max_tokens, frozenset({EOG}),
                         tuple(items))


# A code edit: the answer copies the prompt; the draft is right on most tokens.
COPY = list(range(1, 31))
EDIT = recorded("e1", "code", [50, 51, *COPY, 52], [*COPY[:12], 60, *COPY[13:], EOG],
                [*COPY[:12], 61, *COPY[13:20], 62, *COPY[21:], EOG],
                [0.95] * 12 + [0.3] + [0.95] * 7 + [0.2] + [0.95] * 9 + [0.99])
# Free prose: nothing to copy, the draft right on about two tokens in three.
PROSE_ANSWER = [70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, EOG]
PROSE = recorded("p1", "prose", [40, 41, 42, 43], PROSE_ANSWER,
                 [70, 71, 90, 73, 74, 91, 76, 77, 92, 79, 80, 93, EOG],
                 [0.9, 0.8, 0.2, 0.9, 0.7, 0.3, 0.9, 0.8, 0.1, 0.9, 0.9, 0.2, 0.99])
DATA = recording(EDIT, PROSE)
