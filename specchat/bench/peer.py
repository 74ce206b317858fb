"""The plain decoder people run instead: llama-cpp-python's own `Llama.create_chat_completion`.

Same GGUF, the same thread count for decoding and batches, a context big enough for the
prompt, everything else as llama-cpp-python ships it (its chat template from the GGUF, its
sampler chain, flash attention off, n_batch 512). Greedy like the rest of the bench, from an
empty cache every run.

A prompt with a schema gets the same note on the format as specchat's prompt and
llama-cpp-python's own JSON-schema grammar (response_format with a schema).

It is timed from outside: its `generate` is wrapped so every token it yields gets a
timestamp; decode speed is tokens after the first over the time after the first, the same
"after the first token" measure the report takes from specchat's own chunks for the
`vs llama-cpp` column. The wrapper adds one Python generator hop per token (~1 us).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from specchat.backend.structured import with_format_note
from specchat.bench.prompts import BenchPrompt
from specchat.bench.runner import RunRecord, matches_schema
from specchat.engine.options import Structure

PEER = "llama-cpp"
Clock = Callable[[], float]


@dataclass
class PeerAnswer:
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # since the call, one per token
    prompt_tokens: int = 0
    text: str = ""
    finish_reason: str = ""
    seconds: float = 0.0


class ChatCompletionPeer:
    """Runs bench prompts through a llama_cpp.Llama (duck-typed: tests pass a fake)."""

    name = PEER

    def __init__(self, llm: Any, clock: Clock = time.perf_counter) -> None:
        self.llm = llm
        self.clock = clock

    def answer(self, text: str, max_tokens: int, seed: int | None,
               structure: Structure | None = None) -> PeerAnswer:
        llm, clock, out = self.llm, self.clock, PeerAnswer()
        llm.reset()  # no prefix reuse: a full prefill, as every specchat run pays
        generate = llm.generate
        start = clock()

        def timed(*args: Any, **kwargs: Any) -> Iterator[int]:
            for token in generate(*args, **kwargs):
                if not out.tokens:
                    out.prompt_tokens = int(llm.n_tokens)  # evaluated so far: the prompt
                out.tokens.append(int(token))
                out.times.append(clock() - start)
                yield token

        llm.generate = timed
        try:
            messages = with_format_note([{"role": "user", "content": text}], structure)
            extra = {} if structure is None else {"response_format": {
                "type": "json_object", "schema": json.loads(structure.text)}}
            chunks = llm.create_chat_completion(
                messages=list(messages), max_tokens=max_tokens, temperature=0.0, seed=seed,
                stream=True, **extra)
            for chunk in chunks:
                choice = chunk["choices"][0]
                out.text += choice["delta"].get("content") or ""
                out.finish_reason = choice.get("finish_reason") or out.finish_reason
        finally:
            del llm.generate  # the instance attribute; the class method shows through again
        out.seconds = clock() - start
        return out

    def warm_up(self, text: str, max_tokens: int) -> None:
        self.answer(text, max_tokens, None)

    def run(self, prompt: BenchPrompt, position: int, max_tokens: int,
            seed: int | None) -> RunRecord:
        a = self.answer(prompt.text, max_tokens, seed, prompt.structure())
        first = a.times[0] if a.times else a.seconds
        last = a.times[-1] if a.times else a.seconds
        return RunRecord(
            question_id=prompt.question_id, category=prompt.category, mode=PEER,
            position=position, prompt_tokens=a.prompt_tokens, generated=len(a.tokens),
            # No split of its own: prefill is "until the first token", decode the rest.
            prompt_seconds=first, decode_seconds=last - first, wall_seconds=a.seconds,
            first_chunk_seconds=first, steps=len(a.tokens), drafted=0, accepted=0,
            finish_reason=a.finish_reason or "unknown", tokens=a.tokens, text=a.text,
            stats={}, first_tokens=min(1, len(a.tokens)), last_chunk_seconds=last,
            valid=matches_schema(prompt, a.text))
