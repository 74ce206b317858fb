"""Plain-text summaries of engine statistics: `ask`'s closing line and `auto`'s lines in
/stats (a local Runtime's stats_lines)."""

from __future__ import annotations

from specchat.engine.auto import AutoState
from specchat.engine.stats import Stats

PROMPT_RATE_MIN_TOKENS = 32  # fewer evaluated tokens make a meaningless prompt tok/s


def summary_line(stats: Stats, reason: str | None = None) -> str:
    """One compact line: tokens, speed, acceptance and tokens per target step."""
    parts = [f"{stats.generated} tokens", f"{stats.tokens_per_second:.1f} tok/s",
             f"mode {stats.mode}"]
    if stats.drafted:
        acc = stats.acceptance or 0.0
        parts.append(f"accepted {stats.accepted}/{stats.drafted} ({acc:.0%})")
    parts.append(f"{stats.tokens_per_step:.2f} tok/step" if stats.known("tokens_per_step")
                 else "tok/step unknown")
    parts.append(prompt_part(stats))
    if reason:
        parts.append(f"finish {reason}")
    return " · ".join(parts)


def prompt_part(stats: Stats) -> str:
    """'prompt 3092 tok (3040 cached) in 0.61s · first token 0.72s', with the prompt speed
    when enough was evaluated for it to mean something."""
    cached = f" ({stats.prompt_cached} cached)" if stats.prompt_cached else ""
    count = f"{stats.prompt_tokens} tok" if stats.known("prompt_tokens") else "unknown tok"
    text = f"prompt {count}{cached} in {stats.prompt_seconds:.2f}s"
    rate = stats.prompt_tokens_per_second
    if rate is not None and stats.prompt_evaluated >= PROMPT_RATE_MIN_TOKENS:
        text += f" ({rate:.0f} tok/s)"
    if stats.first_token_seconds > 0:
        text += f" · first token {stats.first_token_seconds:.2f}s"
    return text


def auto_lines(state: AutoState, draft_loaded: bool) -> list[str]:
    """Why `auto` drafts what it drafts, for /stats: costs here, choices made, estimates."""
    info = state.explain()
    ratios = info["verify_cost_ratios"]
    costs = " ".join(f"{n}:{ratios[n - 1]:.2f}" for n in (2, 4, 8, 17) if n <= len(ratios))
    made = ", ".join(f"{k} {v}" for k, v in sorted(info["decisions"].items())) or "none yet"
    lines = [f"auto: steps chose {made}",
             f"auto: a plain step costs {info['step_seconds'] * 1000:.1f} ms here; "
             f"a verify batch of n costs x a step: {costs}"]
    if draft_loaded and state.draft_costs is not None:
        c = info["draft_step_ratio"] or 0.0
        verdict = "can pay" if state.draft_model_can_pay(16) else "cannot pay here, left idle"
        lines.append(f"auto: draft model step = {c:.2f} x a target step: {verdict}")
    for key, rates in info["acceptance_estimates"].items():
        shown = " ".join(f"{r:.0%}" for r in rates)
        where = ", positions 1-4" if len(rates) > 1 else ""
        lines.append(f"auto: est. acceptance {key}{where}: {shown}")
    if info.get("store_estimates"):
        shown = ", ".join(f"{k.removeprefix('store/')} {r:.0%}"
                          for k, r in info["store_estimates"].items())
        lines.append(f"auto: est. acceptance of the drafting store's continuations: {shown}")
    last = info["last_choice"]
    lines.append(f"auto: last choice {last['drafter'] or 'plain'} k={last['k']} "
                 f"(expected {last['expected_speedup']:.2f}x)")
    return lines
