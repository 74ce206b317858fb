"""Runs every prompt through every mode in one process and records what each run did.

Fairness rules, because a 2-core machine shared with other work drifts by 10-20% over minutes:
- the order of modes rotates from prompt to prompt, so drift hits every mode alike;
- both caches are emptied before every run, so every mode pays the same full prefill and no
  mode profits from a prefix the previous mode left behind;
- speed is taken from the engine's own split of prefill and decode time (Stats), never from
  wall time that includes the prompt;
- a short warm-up in every mode comes first, so page faults and lazy allocations of the first
  call are not charged to whichever mode happens to run first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specchat.backend.local import Runtime
from specchat.backend.promptcache import PromptCache
from specchat.bench.prompts import BenchPrompt
from specchat.bench.ttft import FirstToken, warm_first_token
from specchat.engine.events import Chunk, Event, Finished, drain
from specchat.engine.options import SPEC_MODES, GenerationOptions, Spec
from specchat.engine.protocol import common_prefix
from specchat.errors import UsageError

BASELINE = Spec.OFF
WARMUP_TOKENS = 8


@dataclass
class RunRecord:
    """One prompt answered in one mode; `tokens` is kept to compare greedy outputs."""

    question_id: str
    category: str
    mode: str
    position: int  # where this mode ran in the prompt's rotation (0 = first)
    prompt_tokens: int
    generated: int
    prompt_seconds: float
    decode_seconds: float
    wall_seconds: float  # whole call, prefill included, from the injected clock
    first_chunk_seconds: float  # call start to the first streamed text
    steps: int
    drafted: int
    accepted: int
    finish_reason: str
    tokens: list[int]
    text: str
    stats: dict[str, Any]
    first_tokens: int = 0  # tokens that came with the first chunk
    last_chunk_seconds: float = 0.0  # call start to the last chunk
    matched_off: bool | None = None  # None for `off` itself and for sampled runs
    first_divergence: int | None = None  # token index of the first difference from `off`
    valid: bool | None = None  # a schema prompt's answer: JSON that matches (None: no schema)
    round: int = 0  # which pass over the prompts (--rounds): pairs are (prompt, round)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Skipped:
    question_id: str
    category: str
    reason: str


@dataclass
class BenchResult:
    records: list[RunRecord] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    interrupted: bool = False
    first_tokens: list[FirstToken] = field(default_factory=list)  # cold and warm, per prompt


class Peer(Protocol):
    """Another program's decoder timed beside specchat's modes (bench/peer.py)."""

    name: str

    def warm_up(self, text: str, max_tokens: int) -> None: ...

    def run(self, prompt: BenchPrompt, position: int, max_tokens: int,
            seed: int | None) -> RunRecord: ...


@dataclass(frozen=True)
class Step:
    """What the progress display is told: a run is starting (record None) or has finished."""

    prompt: BenchPrompt
    mode: str
    record: RunRecord | None = None


Listener = Callable[[Step], None]
Clock = Callable[[], float]


def parse_modes(value: str | None, default: Sequence[str]) -> list[str]:
    """Validated, de-duplicated modes with the `off` baseline always first."""
    asked = [m.strip() for m in value.split(",") if m.strip()] if value else list(default)
    unknown = [m for m in asked if m not in SPEC_MODES]
    if unknown:
        raise UsageError(f"unknown mode{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"choose from {', '.join(SPEC_MODES)}")
    return [BASELINE, *dict.fromkeys(m for m in asked if m != BASELINE)]


def mode_order(modes: Sequence[str], index: int) -> list[str]:
    """Modes rotated by the prompt index: each mode runs first equally often."""
    if not modes:
        return []
    shift = index % len(modes)
    return [*modes[shift:], *modes[:shift]]


def run_bench(runtime: Runtime, prompts: Sequence[BenchPrompt], modes: Sequence[str],
              options: GenerationOptions, *, listener: Listener | None = None,
              warmup: bool = True, clock: Clock = time.perf_counter,
              prompt_cache: PromptCache | None = None,
              peer: Peer | None = None, rounds: int = 1) -> BenchResult:
    """Answer every prompt in every mode (and with `peer`, whose name is then one of the
    modes), `rounds` times over, the modes of each prompt back to back in a rotating order
    (so a drift of the machine hits every mode alike); Ctrl-C keeps the prompts already
    complete.

    With `prompt_cache` (an empty one, for this run only) each prompt also gets a warm time
    to the first token through it (ttft.py)."""
    result = BenchResult()
    tokenized = _tokenize_all(runtime, prompts, options.max_tokens, result)
    ours = [m for m in modes if peer is None or m != peer.name]
    try:
        if warmup and tokenized:
            _warm_up(runtime, tokenized, ours, options)
            if peer is not None:
                peer.warm_up(min(tokenized, key=lambda t: len(t[1]))[0].text, WARMUP_TOKENS)
        passes = [(r, item) for r in range(rounds) for item in tokenized]
        for turn, (round_, (prompt, tokens)) in enumerate(passes):
            runs = []
            for position, mode in enumerate(mode_order(modes, turn)):
                if peer is not None and mode == peer.name:
                    runs.append(_run_peer(peer, prompt, position, options, listener))
                else:
                    runs.append(_run_one(runtime, prompt, tokens, mode, position, options,
                                         clock, listener))
                runs[-1].round = round_
            mark_greedy_matches(runs, greedy=options.sampling.greedy)
            first = None
            if prompt_cache is not None and round_ == 0:
                cold = next(r.stats for r in runs if r.mode == BASELINE)
                first = warm_first_token(runtime, prompt, tokens, for_prompt(prompt, options),
                                         prompt_cache, cold)
            result.records.extend(runs)
            if first is not None:
                result.first_tokens.append(first)
    except KeyboardInterrupt:
        # The prompt in flight is dropped whole: a prompt missing a mode would bias sums.
        result.interrupted = True
    return result


def _tokenize_all(runtime: Runtime, prompts: Sequence[BenchPrompt], max_tokens: int,
                  result: BenchResult) -> list[tuple[BenchPrompt, list[int]]]:
    """Chat-template every prompt; ones that leave no room for max_tokens are skipped."""
    n_ctx = runtime.target.n_ctx
    kept: list[tuple[BenchPrompt, list[int]]] = []
    for prompt in prompts:
        tokens = runtime.chat_prompt([{"role": "user", "content": prompt.text}],
                                     for_prompt(prompt, GenerationOptions()))
        if len(tokens) + max_tokens > n_ctx:
            result.skipped.append(Skipped(
                prompt.question_id, prompt.category,
                f"{len(tokens)} prompt tokens + {max_tokens} new exceed --ctx {n_ctx}"))
            continue
        kept.append((prompt, tokens))
    return kept


def _warm_up(runtime: Runtime, tokenized: Sequence[tuple[BenchPrompt, list[int]]],
             modes: Sequence[str], options: GenerationOptions) -> None:
    """A few tokens of the shortest prompt in every mode; nothing is recorded."""
    prompt, tokens = min(tokenized, key=lambda item: len(item[1]))
    short = for_prompt(prompt, options).with_values(
        max_tokens=min(WARMUP_TOKENS, options.max_tokens))
    for mode in modes:
        _reset_caches(runtime)
        _consume(runtime.stream(tokens, short.with_values(spec=mode)))


def _run_peer(peer: Peer, prompt: BenchPrompt, position: int, options: GenerationOptions,
              listener: Listener | None) -> RunRecord:
    if listener:
        listener(Step(prompt, peer.name))
    record = peer.run(prompt, position, options.max_tokens, options.sampling.seed)
    if listener:
        listener(Step(prompt, peer.name, record))
    return record


def _run_one(runtime: Runtime, prompt: BenchPrompt, tokens: list[int], mode: str,
             position: int, options: GenerationOptions, clock: Clock,
             listener: Listener | None) -> RunRecord:
    if listener:
        listener(Step(prompt, mode))
    _reset_caches(runtime)
    start = clock()
    first: float | None = None
    first_tokens, last = 0, start

    def on_chunk(chunk: Chunk) -> None:
        nonlocal first, first_tokens, last
        if not chunk.tokens:
            return
        last = clock()
        if first is None:
            first, first_tokens = last, len(chunk.tokens)

    finished = drain(runtime.stream(tokens, for_prompt(prompt, options).with_values(spec=mode)),
                     on_chunk)
    end = clock()
    if finished is None:
        raise RuntimeError(f"the engine ended {mode} run of {prompt.question_id} without "
                           "a Finished event")
    record = _record(prompt, mode, position, finished, wall=end - start,
                     first=(first if first is not None else end) - start)
    record.first_tokens, record.last_chunk_seconds = first_tokens, last - start
    record.valid = matches_schema(prompt, finished.text)
    if listener:
        listener(Step(prompt, mode, record))
    return record


def _record(prompt: BenchPrompt, mode: str, position: int, finished: Finished,
            wall: float, first: float) -> RunRecord:
    stats = finished.stats
    return RunRecord(
        question_id=prompt.question_id, category=prompt.category, mode=mode,
        position=position, prompt_tokens=stats.prompt_tokens, generated=stats.generated,
        prompt_seconds=stats.prompt_seconds, decode_seconds=stats.decode_seconds,
        wall_seconds=wall, first_chunk_seconds=first, steps=stats.steps,
        drafted=stats.drafted, accepted=stats.accepted, finish_reason=finished.reason,
        tokens=list(finished.tokens), text=finished.text, stats=stats.to_dict(),
    )


def for_prompt(prompt: BenchPrompt, options: GenerationOptions) -> GenerationOptions:
    """The options for one prompt: constrained to its schema when it has one."""
    structure = prompt.structure()
    return options if structure is None else options.with_values(structure=structure)


def matches_schema(prompt: BenchPrompt, text: str) -> bool | None:
    """Whether an answer is JSON that matches the prompt's schema (None: it has none)."""
    if prompt.schema is None:
        return None
    from specchat.llm import schemacheck  # checked when the prompt file was read

    schema = json.loads(prompt.schema)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return schemacheck.is_valid(schemacheck.validator(schema), value)


def mark_greedy_matches(runs: Sequence[RunRecord], greedy: bool) -> None:
    """Compare each mode's tokens with `off`'s; sampled runs are not expected to match."""
    base = next((r for r in runs if r.mode == BASELINE), None)
    if base is None or not greedy:
        return
    for run in runs:
        if run is base:
            continue
        run.matched_off = run.tokens == base.tokens
        run.first_divergence = None if run.matched_off else common_prefix(run.tokens,
                                                                          base.tokens)


def _reset_caches(runtime: Runtime) -> None:
    runtime.target.truncate(0)
    if runtime.draft is not None:
        runtime.draft.truncate(0)


def _consume(events: Generator[Event, None, None]) -> None:
    drain(events)
