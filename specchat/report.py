"""Plain-text summaries of engine statistics, shared by ask, chat and bench."""

from __future__ import annotations

from specchat.engine.stats import Stats


def summary_line(stats: Stats, reason: str | None = None) -> str:
    """One compact line: tokens, speed, acceptance and tokens per target step."""
    parts = [f"{stats.generated} tokens", f"{stats.tokens_per_second:.1f} tok/s",
             f"mode {stats.mode}"]
    if stats.drafted:
        acc = stats.acceptance or 0.0
        parts.append(f"accepted {stats.accepted}/{stats.drafted} ({acc:.0%})")
    parts.append(f"{stats.tokens_per_step:.2f} tok/step")
    parts.append(f"prompt {stats.prompt_tokens} tok in {stats.prompt_seconds:.2f}s")
    if reason:
        parts.append(f"finish {reason}")
    return " · ".join(parts)
