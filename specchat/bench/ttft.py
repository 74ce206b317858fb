"""Time to the first token per prompt, cold and warm, for `specchat bench`.

Cold: the `off` run of the prompt, from empty caches (the full prefill, then one step).
Warm: the same prompt again right after, through the prompt cache: its state is saved once
the modes have run, the caches are emptied, and one token is generated with the cache on,
as a second `specchat ask` with the same input would. The cache lives in a directory of its
own for the run (the caller's), so the user's cache neither helps nor fills up.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from specchat.backend.local import Runtime
from specchat.backend.promptcache import PromptCache
from specchat.bench.prompts import BenchPrompt
from specchat.engine.events import drain
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.stats import Stats

OVERALL = "overall"


@dataclass
class FirstToken:
    question_id: str
    category: str
    prompt_tokens: int
    cold_seconds: float
    warm_seconds: float
    restored: int  # prompt tokens the warm run loaded from the cache

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def warm_first_token(runtime: Runtime, prompt: BenchPrompt, tokens: Sequence[int],
                     options: GenerationOptions, cache: PromptCache,
                     cold: dict[str, Any]) -> FirstToken:
    """Save the state the last run left, empty the caches, time one token through the cache.

    `cold` is the `off` run's stats (RunRecord.stats) of the same prompt.
    """
    runtime.prompt_cache = cache
    try:
        runtime.remember_prompt(tokens, Stats(mode=Spec.OFF, prompt_tokens=len(tokens)))
        runtime.target.truncate(0)
        if runtime.draft is not None:
            runtime.draft.truncate(0)
        finished = drain(runtime.stream(tokens, options.with_values(spec=Spec.OFF, max_tokens=1)))
    finally:
        runtime.prompt_cache = None
        cache.clear()  # one prompt's state at a time: the run's disk use stays small
    if finished is None:
        raise RuntimeError(f"no Finished event for the warm run of {prompt.question_id}")
    return FirstToken(prompt.question_id, prompt.category, len(tokens),
                      float(cold.get("first_token_seconds", 0.0)),
                      finished.stats.first_token_seconds, finished.stats.prompt_restored)


def summarize(rows: Sequence[FirstToken]) -> dict[str, dict[str, Any]]:
    """Per category (then overall): prompts, mean prompt tokens, median cold and warm time to
    the first token, and how many times shorter warm is (ratio of the medians)."""
    groups: dict[str, list[FirstToken]] = {}
    for row in rows:
        groups.setdefault(row.category, []).append(row)
    if rows:
        groups[OVERALL] = list(rows)
    out: dict[str, dict[str, Any]] = {}
    for category, group in groups.items():
        cold = statistics.median(r.cold_seconds for r in group)
        warm = statistics.median(r.warm_seconds for r in group)
        out[category] = {
            "prompts": len(group),
            "prompt_tokens": sum(r.prompt_tokens for r in group) / len(group),
            "cold_seconds": cold, "warm_seconds": warm,
            "warm_speedup": cold / warm if warm > 0 else None,
        }
    return out


def render(console: Console, rows: Sequence[FirstToken]) -> None:
    if not rows:
        return
    table = Table(title="time to first token (median)", title_justify="left",
                  caption="warm: the same prompt again, through the prompt cache",
                  caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("category", "n", "prompt tok", "cold s", "warm s", "cold/warm"):
        table.add_column(name, justify="left" if name == "category" else "right",
                         no_wrap=True)
    for category, s in summarize(rows).items():
        ratio = s["warm_speedup"]
        table.add_row(category, str(s["prompts"]), f"{s['prompt_tokens']:.0f}",
                      f"{s['cold_seconds']:.2f}", f"{s['warm_seconds']:.2f}",
                      "-" if ratio is None else f"{ratio:.1f}x")
    console.print(table)
