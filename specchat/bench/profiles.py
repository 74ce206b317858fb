"""Cost profiles: what a machine charges for target batches, draft steps and prefills, as data.

A priced replay (replay.py) charges every model call from a profile instead of the wall clock,
so the engine's policies can be judged on a GPU or an Apple machine that is not here. The
shipped profiles and the arithmetic behind each are in docs/gpu.md. The file (JSON):

    {"format": "specchat-cost-profile", "version": 1, "name": "...", "source": "...",
     "target": {"model": "...", "step_seconds": 0.0064,
                "batch_ratios": [1.0, 1.12, ...],     # batch of n over one step, n = 1, 2, ...
                "prefill_tokens_per_second": 3300},
     "draft": {... the same keys ...} or null,          # null: no draft model on this machine
     "overhead_seconds": 0.00015}                       # per target step, outside the model

An eval of n tokens costs step_seconds x batch_ratios[n-1] for n up to the list's length (past
it, the last slope goes on), and for batches longer than MAX_N (prefills, a draft catching
up) at least n / prefill_tokens_per_second.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from specchat import fileio, fileread
from specchat.backend.calibration import DRAFT_SIZES, TARGET_SIZES, table_from
from specchat.engine.auto import AutoState
from specchat.engine.cost import MAX_N, CostTable
from specchat.errors import UsageError

FORMAT = "specchat-cost-profile"
VERSION = 1
FOLDER = "costprofiles"  # in the specchat.bench package


@dataclass(frozen=True)
class ModelCosts:
    """What one model's evals cost on one machine."""

    model: str
    step_seconds: float
    batch_ratios: tuple[float, ...]
    prefill_tokens_per_second: float

    def batch(self, n: int) -> float:
        """Seconds of one eval of n tokens."""
        table = self.table
        if n <= MAX_N:
            return table.cost(n)
        return max(table.cost(MAX_N), n / self.prefill_tokens_per_second)

    @cached_property
    def table(self) -> CostTable:
        table = CostTable.from_ratios(self.step_seconds, self.batch_ratios)
        table.learn = False
        return table

    def measured(self, sizes: tuple[int, ...], learn: bool = False) -> CostTable:
        """The table calibration would build on that machine from these sizes (it measures
        a few and interpolates), frozen unless `learn`: the replay's prices never drift, and
        a learning table takes in the priced steps as a real run's takes in timed ones."""
        table = table_from({n: self.batch(n) for n in sizes}, max(MAX_N, *sizes))
        table.learn = learn
        return table


@dataclass(frozen=True)
class CostProfile:
    name: str
    source: str
    target: ModelCosts
    draft: ModelCosts | None
    overhead_seconds: float

    def auto_state(self, learn: bool = False) -> AutoState:
        """What `auto` would start from on that machine: the calibration's tables (the
        target at every size, the draft at the few sizes calibration measures); `learn`:
        the target's learns from the steps it is shown, as in a real run."""
        return AutoState(target_costs=self.target.measured(TARGET_SIZES, learn),
                         draft_costs=None if self.draft is None
                         else self.draft.measured(DRAFT_SIZES))


def builtin_names() -> list[str]:
    return sorted(p.name.removesuffix(".json") for p in _folder().iterdir()
                  if p.name.endswith(".json"))


def _folder() -> Any:
    return resources.files("specchat.bench").joinpath(FOLDER)


def load(value: str) -> CostProfile:
    """A profile file, or a built-in profile by name."""
    path = Path(value)
    if os.path.lexists(path):  # a file of that name goes first, whatever it is
        try:
            data = json.loads(fileread.read_text(path, fileread.SETTINGS_LIMIT))
        except FileNotFoundError:
            raise UsageError(f"{path}: a link to no file; give a cost profile file or a "
                             "built-in name") from None
        except fileio.FileIOError as exc:
            raise UsageError(f"{exc}; give a cost profile file or a built-in name") from None
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{path}: not a readable cost profile ({exc})") from None
        return parse(data, str(path))
    if value in builtin_names():
        text = _folder().joinpath(f"{value}.json").read_text(encoding="utf-8")
        return parse(json.loads(text), value)
    raise UsageError(f"{value}: no such cost profile file or built-in profile (built-in: "
                     f"{', '.join(builtin_names())})")


def parse(data: object, where: str) -> CostProfile:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{where}: not a specchat cost profile (\"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise UsageError(f"{where}: cost profile version {data.get('version')!r}; this "
                         f"specchat reads version {VERSION}")
    draft = data.get("draft")
    return CostProfile(
        name=_text(data.get("name"), f"{where}: name"),
        source=str(data.get("source") or ""),
        target=_costs(data.get("target"), f"{where}: target"),
        draft=None if draft is None else _costs(draft, f"{where}: draft"),
        overhead_seconds=_number(data.get("overhead_seconds", 0.0), f"{where}: "
                                 "overhead_seconds", minimum=0.0))


def _costs(value: object, where: str) -> ModelCosts:
    if not isinstance(value, dict):
        raise UsageError(f"{where} must be an object with step_seconds, batch_ratios and "
                         "prefill_tokens_per_second")
    ratios = value.get("batch_ratios")
    if not isinstance(ratios, list) or not ratios:
        raise UsageError(f"{where}: batch_ratios must be a list of numbers, the first 1")
    checked = tuple(_number(r, f"{where}: batch_ratios", minimum=1.0) for r in ratios)
    if abs(checked[0] - 1.0) > 1e-9:
        raise UsageError(f"{where}: batch_ratios[0] is a batch of one: it must be 1")
    return ModelCosts(
        model=str(value.get("model") or ""),
        step_seconds=_number(value.get("step_seconds"), f"{where}: step_seconds",
                             minimum=1e-9),
        batch_ratios=checked,
        prefill_tokens_per_second=_number(value.get("prefill_tokens_per_second"),
                                          f"{where}: prefill_tokens_per_second",
                                          minimum=1e-9))


def _number(value: Any, where: str, minimum: float, maximum: float = 1e9) -> float:
    """A finite number in [minimum, maximum]; the refusal names both ends."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            minimum <= value <= maximum):
        raise UsageError(f"{where} must be a number from {minimum:g} to {maximum:g} "
                         f"(got {str(value)[:40]})")
    return float(value)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where} must be non-empty text")
    return value
