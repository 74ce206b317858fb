"""A text draft's time outside the draft model's evals (docs/drafting.md).

    python benchmarks/textdraft_overhead.py qwen2.5-coder-1.5b smollm2-135m \
        "Write a Python function that reverses a string." "List three colours of the rainbow."

A draft of another vocabulary (engine/textdraft.py) also re-reads the context as its own
tokens and tokenizes its text for the target at every draft token. This answers each prompt
greedily with `--spec draft` (64 tokens) and prints, per prompt, the steps, the acceptance,
the drafting seconds the engine counted and how many of them the draft model's evals took
(the prefill, timed with the prompt, is left out). A ratio, so it holds on a busy machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from specchat.engine import textdraft
from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions, Spec
from specchat.llm.model import load_model
from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.textvocab import LlamaTextVocab
from specchat.models import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("prompts", nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    target = load_model(resolve_model(args.target, quiet=True), n_ctx=2048,
                        n_threads=args.threads)
    draft = load_model(resolve_model(args.draft, quiet=True), n_ctx=2048,
                       n_threads=args.threads)
    spent = [0.0]
    evaluate = draft.eval

    def timed(tokens: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        start = time.perf_counter()
        try:
            return evaluate(tokens, rows)
        finally:
            spent[0] += time.perf_counter() - start

    prepare = textdraft.TextDrafter.prepare

    def prepared(self: textdraft.TextDrafter, context: Sequence[int], fill: bool = True) -> None:
        prepare(self, context, fill)
        spent[0] = 0.0  # the prefill is timed with the prompt, not with the drafts

    draft.eval = timed  # type: ignore[method-assign,assignment]
    textdraft.TextDrafter.prepare = prepared  # type: ignore[method-assign]
    vocabs = textdraft.TextVocabs(LlamaTextVocab(target), LlamaTextVocab(draft))
    template = ChatTemplate.from_model(target)
    options = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=64,
                                spec=Spec.DRAFT)
    for text in args.prompts:
        prompt = chat_tokens(target, template, [{"role": "user", "content": text}])
        *_, done = generate(target, prompt, options, draft=draft, hooks=Hooks(vocabs=vocabs))
        assert isinstance(done, Finished)
        s = done.stats
        outside = 1 - spent[0] / s.draft_seconds if s.draft_seconds else 0.0
        print(f"{text[:30]!r}: steps {s.steps}, accepted {s.accepted}/{s.drafted}, drafting "
              f"{s.draft_seconds:.3f} s, draft evals {spent[0]:.3f} s "
              f"({100 * outside:.1f}% outside them)")


if __name__ == "__main__":
    main()
