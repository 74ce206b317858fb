"""`bench --sessions` tables: per session, from its second request on, every mode's decode
speed against `off`, against llama-cpp-python's plain chat completion, tokens per step, and
what each draft source proposed and had accepted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from specchat.bench.interval import Interval, paired_ratio
from specchat.bench.peer import PEER
from specchat.bench.session_runner import Outcome

BASELINE = "off"
OVERALL = "overall"


@dataclass
class Cell:
    """One mode's sums over some requests."""

    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    requests: int = 0
    sources: dict[str, list[int]] = field(default_factory=dict)  # drafted, accepted
    # (session, request, round) -> (tokens, seconds): one pair of runs each
    pairs: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict)

    def add(self, o: Outcome) -> None:
        # The peer's decode time starts after its first token (bench/peer.py).
        tokens = o.generated - (1 if o.mode == PEER else 0)
        self.pairs[(o.session, o.index, o.round)] = (tokens, o.decode_seconds)
        self.tokens += tokens
        self.seconds += o.decode_seconds
        self.steps += o.steps
        self.requests += 1
        for name, counts in o.sources.items():
            mine = self.sources.setdefault(name, [0, 0])
            mine[0] += int(counts.get("drafted", 0))
            mine[1] += int(counts.get("accepted", 0))

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Row:
    session: str
    cells: dict[str, Cell]
    same: int = 0  # runs of a request whose greedy answer equals off's in every mode
    compared: int = 0

    def ratio(self, mode: str, base: str = BASELINE) -> float | None:
        a, b = self.cells.get(mode), self.cells.get(base)
        return a.rate / b.rate if a and b and a.rate and b.rate else None

    def interval(self, mode: str, base: str = BASELINE) -> Interval | None:
        """The ratio's 95% interval, paired per request and round (interval.py)."""
        a, b = self.cells.get(mode), self.cells.get(base)
        if a is None or b is None:
            return None
        keys = [k for k in a.pairs if k in b.pairs]
        return paired_ratio([a.pairs[k] for k in keys], [b.pairs[k] for k in keys])


def summarize(outcomes: Sequence[Outcome], modes: Sequence[str]) -> list[Row]:
    """One row per session and an overall one, over every request but each session's first
    (in every round)."""
    rows: dict[str, Row] = {}
    by_request: dict[tuple[str, int, int], dict[str, Outcome]] = {}
    for o in outcomes:
        by_request.setdefault((o.session, o.index, o.round), {})[o.mode] = o
        if o.index == 0:
            continue
        for key in (o.session, OVERALL):
            row = rows.setdefault(key, Row(key, {m: Cell() for m in modes}))
            row.cells[o.mode].add(o)
    for (session, index, _), found in by_request.items():
        base = found.get(BASELINE)
        if index == 0 or base is None:
            continue
        ours = [o for m, o in found.items() if m not in (BASELINE, PEER)]
        same = all(_same_answer(o, base) for o in ours)
        for key in (session, OVERALL):
            rows[key].compared += 1
            rows[key].same += int(same)
    overall = rows.pop(OVERALL, None)
    return [*rows.values(), *([overall] if overall else [])]


def _same_answer(a: Outcome, b: Outcome) -> bool:
    return a.tokens == b.tokens if a.tokens and b.tokens else a.text == b.text


def render(console: Console, rows: Sequence[Row], modes: Sequence[str]) -> None:
    ours = [m for m in modes if m not in (BASELINE, PEER)]
    table = Table(title="From each session's second request on: decode tokens/s, speed over "
                  "off and over llama-cpp-python (lcp), tokens per step, accepted/drafted by "
                  "source, greedy answers equal to off's (req: requests run, in all rounds)",
                  title_justify="left")
    table.add_column("session", overflow="fold")
    table.add_column("req", justify="right")
    for m in modes:
        table.add_column("lcp" if m == PEER else m, justify="right")
    for m in ours:
        prefix = f"{m} " if len(ours) > 1 else ""
        table.add_column(f"{prefix}/off", justify="right")
        table.add_column(f"{prefix}95% CI", justify="right")
        if PEER in modes:
            table.add_column(f"{prefix}/lcp", justify="right")
        table.add_column(f"{prefix}t/step", justify="right")
        table.add_column(f"{prefix}by source", overflow="fold")
    table.add_column("=off", justify="right")
    for row in rows:
        base = row.cells.get(BASELINE)
        cells = [row.session, str(base.requests if base else 0)]
        # A mode that ran none of these requests (the peer skips sessions with tools): "-".
        cells += [f"{row.cells[m].rate:.1f}" if row.cells[m].requests else "-" for m in modes]
        for m in ours:
            cells.append(_x(row.ratio(m)))
            interval = row.interval(m)
            cells.append("-" if interval is None else interval.text())
            if PEER in modes:
                cells.append(_x(row.ratio(m, PEER)))
            c = row.cells[m]
            cells.append(f"{c.tokens / c.steps:.2f}" if c.steps else "-")
            cells.append(", ".join(f"{n} {a}/{d}" for n, (d, a) in sorted(c.sources.items()))
                         or "-")
        cells.append(f"{row.same}/{row.compared}")
        table.add_row(*cells, style="bold" if row.session == OVERALL else None)
    console.print(table)
    overall = next((r for r in rows if r.session == OVERALL), None)
    noise = [m for m in ours if overall and (i := overall.interval(m)) and i.within_noise]
    if noise:
        console.print(f"overall, inside the noise (95% CI includes 1.00x): {', '.join(noise)}")


def _bounds(interval: Interval | None) -> list[float] | None:
    if interval is None or interval.low is None or interval.high is None:
        return None
    return [interval.low, interval.high]


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def to_json(outcomes: Sequence[Outcome], rows: Sequence[Row], modes: Sequence[str],
            settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "settings": settings,
        "sessions": [{"session": r.session, "greedy_equal": r.same, "compared": r.compared,
                      "modes": {m: {"tokens": c.tokens, "seconds": c.seconds, "steps": c.steps,
                                    "tokens_per_second": c.rate,
                                    "vs_off": r.ratio(m), "sources": c.sources,
                                    "vs_off_ci95": _bounds(r.interval(m))}
                                for m, c in r.cells.items()}} for r in rows],
        "runs": [o.to_dict() for o in outcomes],
    }
