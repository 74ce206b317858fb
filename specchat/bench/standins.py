"""Stand-in models for every replay (`specchat bench --cost-profile`, the sweep, the research
scripts in benchmarks/): they answer what the real models answered, and charge a clock what
the priced machine would have taken.

The target's greedy choice after any prefix of prompt + answer is the answer's next token;
the draft's is the token recorded for that position (recording.py). A row for a position past
a wrong draft token is never read by greedy acceptance, so it may say anything: it says the
same as on the recorded path. The draft's rows also carry the recorded probability of its
choice (the rest spread evenly), so a policy reading the draft's confidence reads what the
real draft said. Token ids are renumbered densely so rows stay small. A target that verifies
trees (TreeStandIn) chooses, in a row whose path left the answer, an end-of-generation token:
acceptance never walks down such a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.bench.profiles import load
from specchat.bench.recording import Recorded
from specchat.engine.cost import CostTable
from specchat.errors import UsageError

CPU_PROFILE = "cpu-2core-qwen1.5b"  # research scripts' default cost table (`--table cpu`)
HIGH = 10.0  # the logit of the target's choice; every other is 0
SURE = 0.9995  # the most a recorded probability is taken as (3 decimals: 1.0 is "above this")


class Prices(Protocol):
    """What one model's evals cost (a cost profile's ModelCosts, or a bare cost table)."""

    def batch(self, n: int) -> float:
        """Seconds of one eval of n tokens."""
        ...


@dataclass(frozen=True)
class TablePrices:
    """Prices from one cost table alone (a research script's `--table`): a batch of n costs
    what the table says, however long."""

    table: CostTable

    def batch(self, n: int) -> float:
        return self.table.cost(n)

    @classmethod
    def named(cls, table: str | None) -> TablePrices:
        """`cpu` (None too: the built-in profile cpu-2core-qwen1.5b's target, measured on a
        quiet 2-core CPU), `gpu` (a batch of n costs 1 + 0.03 (n - 1) steps) or the batch
        ratios themselves, comma-separated."""
        if table in (None, "cpu"):
            ratios = list(load(CPU_PROFILE).target.batch_ratios)
        elif table == "gpu":
            ratios = [1 + 0.03 * i for i in range(65)]
        else:
            try:
                ratios = [float(r) for r in table.split(",")]
            except ValueError:
                raise UsageError(f"--table {table}: cpu, gpu or numbers R1,R2,...") from None
        cost = CostTable.from_ratios(1.0, ratios)
        cost.learn = False
        return cls(cost)


@dataclass
class PricedClock:
    """Seconds the profiled machine has spent so far; the target's own prefill is counted
    apart, since every mode pays it alike and speedups leave it out."""

    now: float = 0.0
    target_prefill: float = 0.0
    overhead: float = 0.0  # charged with every target step

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Renumbered:
    """One recorded prompt with dense ids: 0..n_vocab-1, the end-of-generation ids included."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...]
    draft: tuple[int, ...] | None
    draft_p: tuple[float, ...] | None
    eog: frozenset[int]
    n_vocab: int
    ids: tuple[int, ...] = field(repr=False)  # dense id -> recorded id

    @classmethod
    def of(cls, item: Recorded, eog: frozenset[int]) -> Renumbered:
        ids = sorted({*item.prompt, *item.answer, *(item.draft or ()), *eog})
        dense = {t: i for i, t in enumerate(ids)}

        def ren(tokens: Sequence[int]) -> tuple[int, ...]:
            return tuple(dense[t] for t in tokens)

        return cls(ren(item.prompt), ren(item.answer),
                   None if item.draft is None else ren(item.draft), item.draft_p,
                   frozenset(dense[t] for t in eog), max(len(ids), 1), tuple(ids))

    @classmethod
    def dense(cls, prompt: Sequence[int], answer: Sequence[int], n_vocab: int) -> Renumbered:
        """Ids already dense below n_vocab - 1 (a research script's data, renumbered over a
        whole set so that earlier answers share its ids); n_vocab - 1 ends generation."""
        return cls(tuple(prompt), tuple(answer), None, None, frozenset({n_vocab - 1}),
                   n_vocab, tuple(range(n_vocab)))


class StandIn:
    """A LogitsModel whose greedy choice after prompt + answer[:i] is `follow[i]` (with
    probability `sure[i]` when given), priced by `costs`.

    `role` "target" charges a prefill (a call asking only for the last row, as fill_cache
    does) apart from verify steps; verify steps and every draft call pay the clock's
    overhead (the loop's own work per model call).
    """

    n_ctx = 1 << 20

    def __init__(self, follow: Sequence[int], n_prompt: int, data: Renumbered,
                 costs: Prices, clock: PricedClock, role: str,
                 sure: Sequence[float] | None = None) -> None:
        self.follow = follow  # follow[i]: the choice after prompt + answer[:i]
        self.sure = sure
        self.n_prompt = n_prompt
        self.data, self.costs, self.clock, self.role = data, costs, clock, role
        self._tokens: list[int] = []
        self.eog_tokens: frozenset[int] = data.eog
        self._fallback = min(data.eog) if data.eog else 0

    @property
    def n_vocab(self) -> int:
        return self.data.n_vocab

    @property
    def tokens(self) -> Sequence[int]:
        return tuple(self._tokens)

    def eval(self, tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
        start = len(self._tokens)
        self._tokens.extend(tokens)
        seconds = self.costs.batch(len(tokens))
        self.clock.now += seconds
        if self.role == "target" and list(logit_rows) == [-1]:
            self.clock.target_prefill += seconds
        else:
            self.clock.now += self.clock.overhead
        rows = [len(tokens) + r if r < 0 else r for r in logit_rows]
        out = np.zeros((len(rows), self.n_vocab), dtype=np.float32)
        for k, r in enumerate(rows):
            token, logit = self._choice(start + r)
            out[k, token] = logit
        return out

    def _choice(self, position: int) -> tuple[int, float]:
        """The token chosen after `position`, and its logit (every other logit is 0)."""
        i = position - self.n_prompt + 1  # answer tokens before the one chosen here
        if not 0 <= i < len(self.follow):
            return self._fallback, HIGH
        if self.sure is None or self.n_vocab < 2:
            return self.follow[i], HIGH
        # softmax: e^L / (e^L + V - 1) = p  <=>  L = log(p (V - 1) / (1 - p))
        p = min(max(self.sure[i], 1.0 / self.n_vocab + 1e-6), SURE)
        return self.follow[i], float(np.log(p * (self.n_vocab - 1) / (1.0 - p)))

    def truncate(self, n: int) -> None:
        del self._tokens[max(n, 0):]

    def token_bytes(self, token: int) -> bytes:
        return b"x"


class TreeStandIn(StandIn):
    """A target stand-in that also verifies trees (a TreeModel), priced as one batch."""

    def __init__(self, *args: object, branches: int = 8, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.max_branches = branches
        self._pending: tuple[int, ...] = ()

    def eval_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        start = len(self._tokens)
        self.clock.now += self.costs.batch(len(tokens)) + self.clock.overhead
        out = np.zeros((len(tokens), self.n_vocab), dtype=np.float32)
        paths: list[tuple[int, ...]] = []
        for i, token in enumerate(tokens):
            path = (*paths[parents[i]], int(token)) if i else (int(token),)
            paths.append(path)
            on_answer = self._on_answer(start, path)
            choice, logit = self._choice(start + len(path) - 1)
            out[i, choice if on_answer else self._fallback] = logit if on_answer else HIGH
        self._tokens.append(int(tokens[0]))
        self._pending = tuple(int(t) for t in tokens)
        return out

    def _on_answer(self, start: int, path: tuple[int, ...]) -> bool:
        """Whether the cache + path so far is prompt + answer (or a prefix of it)."""
        full = (*self.data.prompt, *self.data.answer)
        return tuple(full[start: start + len(path)]) == path

    def keep_path(self, rows: Sequence[int]) -> None:
        self._tokens.extend(self._pending[r] for r in rows)
        self._pending = ()

    def truncate(self, n: int) -> None:
        self._pending = ()
        super().truncate(n)


def stand_ins(data: Renumbered, target: Prices, draft: Prices | None,
              clock: PricedClock) -> tuple[StandIn, StandIn | None]:
    """The target (its answer) and, when both a recorded draft and draft costs exist, the
    draft (its recorded proposals)."""
    n = len(data.prompt)
    t = StandIn(data.answer, n, data, target, clock, "target")
    if draft is None or data.draft is None:
        return t, None
    return t, StandIn(data.draft, n, data, draft, clock, "draft", data.draft_p)
