"""Sums per category and mode, the tables, and the JSON document of a benchmark run.

Speed is Spec-Bench's definition: summed new tokens over summed decode time, per mode, and
speedup is that ratio over the `off` baseline's. A mean of per-prompt speedups would weigh a
10-token answer like a 128-token one, and greedy outputs of different lengths (divergence at
near-ties) would skew it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from specchat.backend.calibration import calibration_rows
from specchat.bench import ttft
from specchat.bench.interval import Interval, paired_ratio
from specchat.bench.peer import PEER
from specchat.bench.runner import BASELINE, BenchResult, RunRecord
from specchat.engine.auto import AutoState

OVERALL = "overall"
SCHEMA_VERSION = 1
SHOWN_DIVERGENCES = 3


@dataclass
class ModeSummary:
    """Sums over the runs of one mode in one category (or overall)."""

    mode: str
    prompts: int = 0
    generated: int = 0
    decode_seconds: float = 0.0
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    compared: int = 0  # runs whose greedy output was compared with `off`
    matched: int = 0
    divergences: list[tuple[str, int]] = field(default_factory=list)  # (question, token index)
    verify_seconds: float = 0.0
    draft_seconds: float = 0.0
    after_first_tokens: int = 0  # tokens after the first chunk, timed from outside
    after_first_seconds: float = 0.0
    checked: int = 0  # answers to schema prompts
    valid: int = 0  # of those, JSON that matches the schema
    # (prompt, round): (tokens, seconds), what the speedup's interval pairs
    requests: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)


    def add(self, record: RunRecord) -> None:
        self.after_first_tokens += record.generated - record.first_tokens
        self.after_first_seconds += record.last_chunk_seconds - record.first_chunk_seconds
        self.prompts += 1
        if record.valid is not None:
            self.checked += 1
            self.valid += int(record.valid)
        self.generated += record.generated
        self.decode_seconds += record.decode_seconds
        self.requests[(record.question_id, record.round)] = (record.generated,
                                                             record.decode_seconds)
        self.prompt_tokens += record.prompt_tokens
        self.prompt_seconds += record.prompt_seconds
        self.steps += record.steps
        self.drafted += record.drafted
        self.accepted += record.accepted
        self.verify_seconds += float(record.stats.get("verify_seconds", 0.0))
        self.draft_seconds += float(record.stats.get("draft_seconds", 0.0))
        if record.matched_off is not None:
            self.compared += 1
            self.matched += int(record.matched_off)
            if not record.matched_off and record.first_divergence is not None:
                self.divergences.append((record.question_id, record.first_divergence))

    @property
    def tokens_per_second(self) -> float | None:
        return self.generated / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def tokens_per_step(self) -> float | None:
        return self.generated / self.steps if self.steps else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def other_ms_per_step(self) -> float | None:
        """Decode time outside the target's verify calls and the drafter, per step: mostly
        Python (sampling, acceptance, bookkeeping, detokenizing)."""
        if not self.steps:
            return None
        other = self.decode_seconds - self.verify_seconds - self.draft_seconds
        return 1000 * other / self.steps

    def speedup(self, baseline: ModeSummary) -> float | None:
        mine, base = self.tokens_per_second, baseline.tokens_per_second
        return mine / base if mine is not None and base else None

    def speedup_interval(self, baseline: ModeSummary) -> Interval | None:
        """The speedup's 95% interval, paired per prompt (interval.py)."""
        ids = [q for q in self.requests if q in baseline.requests]
        return paired_ratio([self.requests[q] for q in ids],
                            [baseline.requests[q] for q in ids])

    @property
    def outside_tokens_per_second(self) -> float | None:
        """Tokens after the first over the time after it, as seen by the caller: the one
        measure that applies to another program's decoder too."""
        if self.after_first_seconds <= 0:
            return None
        return self.after_first_tokens / self.after_first_seconds

    def speedup_outside(self, peer: ModeSummary | None) -> float | None:
        if peer is None:
            return None
        mine, base = self.outside_tokens_per_second, peer.outside_tokens_per_second
        return mine / base if mine is not None and base else None

    def to_dict(self, baseline: ModeSummary | None,
                peer: ModeSummary | None = None) -> dict[str, Any]:
        return {
            "outside_tokens_per_second": self.outside_tokens_per_second,
            "vs_" + PEER: self.speedup_outside(peer),
            "mode": self.mode, "prompts": self.prompts, "generated": self.generated,
            "decode_seconds": self.decode_seconds, "prompt_tokens": self.prompt_tokens,
            "prompt_seconds": self.prompt_seconds, "steps": self.steps,
            "drafted": self.drafted, "accepted": self.accepted,
            "tokens_per_second": self.tokens_per_second,
            "speedup": self.speedup(baseline) if baseline is not None else None,
            **_interval_fields(None if baseline is None or self.mode in (PEER, BASELINE)
                               else self.speedup_interval(baseline)),
            "tokens_per_step": self.tokens_per_step, "acceptance": self.acceptance,
            "verify_seconds": self.verify_seconds, "draft_seconds": self.draft_seconds,
            "other_ms_per_step": self.other_ms_per_step,
            "greedy_compared": self.compared, "greedy_matched": self.matched,
            "schema_checked": self.checked, "schema_valid": self.valid,
            "divergences": [{"question_id": q, "first_divergence": i}
                            for q, i in self.divergences],
        }


Summary = dict[str, dict[str, ModeSummary]]  # category (and "overall") -> mode -> sums


def summarize(records: Sequence[RunRecord], modes: Sequence[str]) -> Summary:
    """Sums per category in first-seen order, then the overall sums."""
    summary: Summary = {}
    for record in records:
        for key in (record.category, OVERALL):
            table = summary.setdefault(key, {m: ModeSummary(m) for m in modes})
            table.setdefault(record.mode, ModeSummary(record.mode)).add(record)
    if OVERALL in summary:
        summary[OVERALL] = summary.pop(OVERALL)  # keep it last
    return summary


def summary_to_dict(summary: Summary) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for category, by_mode in summary.items():
        base, peer = by_mode.get(BASELINE), by_mode.get(PEER)
        out[category] = {mode: s.to_dict(base, peer) for mode, s in by_mode.items()}
    return out


def to_json(result: BenchResult, modes: Sequence[str], settings: dict[str, Any]) -> dict[str, Any]:
    """Everything a later analysis needs: settings, every run, the sums, what was skipped."""
    return {
        "schema": SCHEMA_VERSION,
        "settings": settings,
        "modes": list(modes),
        "interrupted": result.interrupted,
        "skipped": [s.__dict__ for s in result.skipped],
        "records": [r.to_dict() for r in result.records],
        "summary": summary_to_dict(summarize(result.records, modes)),
        "first_token": {"prompts": [f.to_dict() for f in result.first_tokens],
                        "summary": ttft.summarize(result.first_tokens)},
    }


def render(console: Console, summary: Summary, greedy: bool) -> None:
    """One table per category, then the overall one (n: prompts; accepted: accepted share
    of the drafted tokens; greedy=off: answers identical to off's)."""
    for category, by_mode in summary.items():
        console.print(_table(category, by_mode, greedy))
    overall = summary.get(OVERALL)
    if overall and BASELINE in overall:
        base = overall[BASELINE]
        rate = base.prompt_tokens / base.prompt_seconds if base.prompt_seconds else 0.0
        console.print(f"prefill (timed apart, not in the speeds above): {base.prompt_tokens} "
                      f"prompt tokens per mode, {rate:.0f} tok/s in mode off")
        other = ", ".join(f"{m} {s.other_ms_per_step:.2f}" for m, s in overall.items()
                          if s.other_ms_per_step is not None and m != PEER)
        console.print(f"decode time outside verify and drafting, ms per step: {other}")


def _table(category: str, by_mode: dict[str, ModeSummary], greedy: bool) -> Table:
    # No vertical rules: eight columns must fit in 80 characters when piped to a file.
    table = Table(title=category, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    peer = by_mode.get(PEER)
    peer = peer if peer is not None and peer.prompts else None
    names = ["mode", "n", "tokens", "tok/s", "speedup", *(["vs lcp"] if peer else []),
             "tok/step", "accepted", "=off" if peer else "greedy=off"]
    for name in names:
        table.add_column(name, justify="left" if name == "mode" else "right", no_wrap=True)
    base = by_mode.get(BASELINE)
    noise, intervals = [], []
    for mode, s in by_mode.items():
        if not s.prompts:
            continue
        is_peer = mode == PEER
        speed = s.outside_tokens_per_second if is_peer else s.tokens_per_second
        speedup = None if is_peer or base is None else s.speedup(base)
        interval = None if speedup is None or base is None or mode == BASELINE \
            else s.speedup_interval(base)
        if interval is not None and interval.low is not None:
            intervals.append(f"{mode} {interval.text()}")
            if interval.within_noise:
                noise.append(mode)
        vs_peer = [_num(s.speedup_outside(peer), "{:.2f}x")] if peer else []
        table.add_row(
            mode, str(s.prompts), str(s.generated), _num(speed, "{:.1f}"),
            _num(speedup, "{:.2f}x"), *vs_peer,
            _num(None if is_peer else s.tokens_per_step, "{:.2f}"),
            _acceptance(s), _greedy_cell(s, mode, greedy),
        )
    notes = [_divergence_note(s) for s in by_mode.values() if s.divergences]
    if intervals:
        notes.append("speedup, 95% interval (bootstrap over prompts, paired): "
                     + ", ".join(intervals))
    if noise:
        notes.append(f"inside the noise (95% CI includes 1.00x): {', '.join(noise)}")
    checked = [s for s in by_mode.values() if s.checked]
    if checked:
        notes.append("answers that are JSON matching their schema: " + ", ".join(
            f"{s.mode} {s.valid}/{s.checked}" for s in checked))
    if peer:
        notes.append(f"vs lcp: decode speed after the first token over {PEER}'s (llama-cpp-"
                     "python create_chat_completion, same GGUF and threads), timed from outside")
    if notes:
        # Kept out of the cells so that the table stays narrow enough for 80 columns.
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


def _interval_fields(interval: Interval | None) -> dict[str, Any]:
    if interval is None or interval.low is None:
        return {"speedup_ci95": None, "within_noise": None}
    return {"speedup_ci95": [interval.low, interval.high],
            "within_noise": interval.within_noise}


def _acceptance(s: ModeSummary) -> str:
    if not s.drafted:
        return "-"
    return f"{s.accepted / s.drafted:.0%}/{s.drafted}"


def _greedy_cell(s: ModeSummary, mode: str, greedy: bool) -> str:
    if mode == BASELINE:
        return "-"
    return f"{s.matched}/{s.compared}" if greedy else "n/a"


def _divergence_note(s: ModeSummary) -> str:
    shown = ", ".join(f"{q}@{i}" for q, i in s.divergences[:SHOWN_DIVERGENCES])
    more = len(s.divergences) - SHOWN_DIVERGENCES
    return (f"{s.mode} differs from off (question@first token): {shown}"
            f"{f' and {more} more' if more > 0 else ''}")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


CEILING_KS = (1, 2, 3, 4, 8, 16)


def ceiling_summary(state: AutoState) -> dict[str, float]:
    """By draft length k: the speedup a free drafter whose every token is accepted could
    reach here, (k+1) / cost(k+1), from the verify costs measured on this machine."""
    rows = calibration_rows(state.target_costs, None, max_k=max(CEILING_KS))
    return {str(r["k"]): round(float(r["ceiling"] or 0), 3) for r in rows
            if r["k"] in CEILING_KS}


def render_ceiling(console: Console, ceiling: dict[str, float]) -> None:
    parts = ", ".join(f"{v:.2f}x at k={k}" for k, v in ceiling.items())
    console.print(f"ceiling here (a free drafter whose every token is accepted, from the "
                  f"measured verify costs): {parts}")


def print_calibration(console: Console, state: AutoState, target: str,
                      draft: str | None) -> None:
    """The measured cost of a verify batch here, the ceiling it allows, and the acceptance a
    draft model needs to break even (issue: `specchat bench --calibrate`)."""
    rows = calibration_rows(state.target_costs, state.draft_costs)
    step_ms = state.target_costs.cost(1) * 1000
    title = f"{target}: one step {step_ms:.1f} ms"
    if state.draft_costs is not None:
        title += (f"; draft {draft} step {state.draft_costs.cost(1) * 1000:.1f} ms "
                  f"(c = {state.draft_costs.cost(1) / state.target_costs.cost(1):.2f})")
    table = Table(title=title, box=box.SIMPLE_HEAVY)
    for name in ("k drafted", "verify batch", "ms", "x one step", "ceiling (k+1)/cost",
                 "draft needs acceptance"):
        table.add_column(name, justify="right")
    for row in rows:
        even = row["draft_break_even"]
        even_cell = "-" if even is None else ("never" if even == float("inf") else f"{even:.0%}")
        table.add_row(str(row["k"]), str(row["batch"]), f"{float(row['seconds'] or 0) * 1000:.1f}",
                      f"{row['ratio']:.2f}", f"{row['ceiling']:.2f}x", even_cell)
    console.print(table)
    console.print("ceiling: the speedup of a free drafter whose every token is accepted; "
                  "'draft needs acceptance': per-position acceptance at which the draft model "
                  "only breaks even.")
