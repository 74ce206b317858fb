"""Scripted `specchat bench` runs: a runtime whose engine is replaced by fixed statistics per
mode (no real timing), small prompt sets, and hand-made run records and session outcomes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from specchat.backend.local import Runtime
from specchat.bench import prompts as bp
from specchat.bench.runner import RunRecord
from specchat.bench.session_runner import Outcome
from specchat.engine.events import Chunk, Event, Finished
from specchat.engine.options import GenerationOptions
from specchat.engine.stats import Stats

SCRIPT = {"off": (20, 2.0), "ngram": (20, 1.0), "auto": (20, 1.6)}  # tokens, decode seconds


def scripted(runtime: Runtime, calls: list[tuple[str, int]],
             tokens_for: dict[str, list[int]] | None = None) -> Runtime:
    """Replace the engine by a script: fixed Stats per mode, and record each call."""

    def stream(prompt: Sequence[int], options: GenerationOptions) -> Iterator[Event]:
        calls.append((options.spec, len(runtime.target.tokens)))
        runtime.target.eval(list(prompt[:3]), [])  # leaves state behind, like a real run
        n, seconds = SCRIPT[options.spec]
        n = min(n, options.max_tokens)
        toks = tuple((tokens_for or {}).get(options.spec, list(range(n))))
        stats = Stats(mode=options.spec, prompt_tokens=len(prompt), prompt_seconds=0.5,
                      generated=len(toks), steps=len(toks) // 2, drafted=8, accepted=6,
                      decode_seconds=seconds)
        yield Chunk(text="a", tokens=toks[:1], from_draft=(False,), stats=stats)
        yield Finished(reason="length", text="ab", tokens=toks, stats=stats)

    runtime.stream = stream  # type: ignore[method-assign]
    return runtime


def small_prompts(n: int) -> list[bp.BenchPrompt]:
    return [bp.BenchPrompt(str(i), "qa" if i % 2 else "writing", f"q{i}") for i in range(n)]


def record(qid: str, mode: str, generated: int, seconds: float, category: str = "qa",
           tokens: list[int] | None = None, steps: int = 0, drafted: int = 0,
           accepted: int = 0) -> RunRecord:
    return RunRecord(qid, category, mode, 0, 5, generated, 0.1, seconds, seconds + 0.1, 0.1,
                     steps or generated, drafted, accepted, "length", tokens or [], "", {})


def outcome(session: str, index: int, mode: str, tokens: int, seconds: float,
            answer: list[int], sources: dict[str, dict[str, int]] | None = None) -> Outcome:
    return Outcome(session, index, mode, tokens, seconds, tokens // 2, "", answer,
                   sources or {})
