"""Cross-vocabulary drafts priced on other machines' costs (docs/drafting.md).

An estimate of what the cross-vocabulary drafts measured in docs/drafting.md section 6
would give on the shipped GPU cost profiles (specchat/bench/costprofiles).

Not a replay: a recording cannot teacher-force a draft of another vocabulary (bench/recording.py
leaves it out), so this prices the measured averages instead. Per pair: tokens per step and
drafted tokens per step from the CPU runs, draft evals per proposed token from the measured
1.38 (76 evals for 55 proposed tokens, Gemma 3 target). A step then costs the overhead, a
verify batch of (drafted + 1) tokens (interpolated between sizes: the mean of a convex-ish
curve, a slight underestimate) and that many draft steps; a plain step costs the overhead
and one target step. The profile's draft step (a 0.5B-class draft) stands for these drafts:
a 135M-270M model's GPU step is no cheaper, being latency-bound.

    python benchmarks/textdraft_priced.py
"""

from __future__ import annotations

import math

from specchat.bench.profiles import CostProfile, ModelCosts, builtin_names, load

EVALS_PER_PROPOSED = 76 / 55
# (target, draft, answer tokens, drafted, tokens per step): docs/drafting.md section 6,
# greedy, 64 tokens x 3 prompts (192 answer tokens), --spec draft, draft_max 16. The profiles'
# targets are 7-32B models: this is what the same acceptance would give there.
MEASURED = [
    ("Qwen2.5-Coder-1.5B", "SmolLM2-135M", 192, 157, 1.98),
    ("Qwen2.5-Coder-1.5B", "Gemma-3-270M", 192, 165, 1.73),
    ("SmolLM2-135M", "Qwen2.5-Coder-0.5B", 192, 159, 1.90),
]


def verify_seconds(target: ModelCosts, size: float) -> float:
    lo = max(1, math.floor(size))
    return target.batch(lo) + (size - lo) * (target.batch(lo + 1) - target.batch(lo))


def speedup(profile: CostProfile, tokens: int, drafted: int, per_step: float) -> float:
    assert profile.draft is not None
    steps = tokens / per_step
    k = drafted / steps
    step = (profile.overhead_seconds + verify_seconds(profile.target, k + 1)
            + k * EVALS_PER_PROPOSED * profile.draft.step_seconds)
    plain = profile.overhead_seconds + profile.target.step_seconds
    return per_step * plain / step


def main() -> None:
    profiles = [load(name) for name in builtin_names()]
    gpu = [p for p in profiles if p.draft is not None and not p.name.startswith("cpu")]
    print("estimated speedup over plain decoding (from measured acceptance, not a replay)")
    print(f"{'target':20} {'draft':20} {'tok/step':>8} {'evals/step':>10} "
          + " ".join(f"{p.name:>18}" for p in gpu))
    for target, draft, tokens, drafted, per_step in MEASURED:
        evals = drafted / (tokens / per_step) * EVALS_PER_PROPOSED
        row = " ".join(f"{speedup(p, tokens, drafted, per_step):>17.2f}x" for p in gpu)
        print(f"{target:20} {draft:20} {per_step:>8.2f} {evals:>10.2f} {row}")


if __name__ == "__main__":
    main()
