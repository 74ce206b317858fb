"""Prefill speed: specchat's backend beside llama-cpp-python's `Llama` (docs/performance.md).

    python benchmarks/prefill.py [-m qwen2.5-coder-1.5b] [--tokens 3000] [--reps 2]
        [--threads 2] [--variants llama,specchat,specchat-fa-off,specchat-ub256]

The prompt is specchat's own source text cut to about --tokens tokens, in a chat template.
`llama`: `Llama(...).create_chat_completion(max_tokens=1)` with n_threads and n_threads_batch
set to --threads, a context large enough, everything else default (flash attention off);
`llama-fa-on` the same with flash_attn=True. Its prefix cache is reset before every run.
`specchat*`: load_model() and the engine's chunked prefill of the same messages plus the
first step (time to first token). Variants run in turn, --reps rounds, the
order rotating each round, so a shared machine's drift hits all alike. Prints the median
seconds and tokens/s per variant. Lives outside the package: only specchat/llm/
imports llama_cpp inside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import llama_cpp

from specchat.engine.drafters import fill_cache
from specchat.llm import ChatTemplate, LlamaModel, chat_tokens, load_model
from specchat.models import resolve_model

Runner = Callable[[], float]


def source_text(n_chars: int) -> str:
    root = Path(__file__).resolve().parent.parent / "specchat"
    text = "".join(p.read_text() for p in sorted(root.rglob("*.py")))
    return text[:n_chars]


def messages_for(target_tokens: int, count: Callable[[str], int]) -> list[dict[str, str]]:
    chars = target_tokens * 3
    while True:
        text = source_text(chars)
        n = count(text)
        if n >= target_tokens or len(text) < chars:
            break
        chars = int(chars * target_tokens / max(n, 1)) + 200
    return [{"role": "user", "content": text + "\n\nWhat does this code do?"}]


def long_prompt(path: Path | str, n_tokens: int, threads: int
                ) -> tuple[list[dict[str, str]], list[int]]:
    """About `n_tokens` of specchat's source as one chat message, and its token ids in the
    model's chat template."""
    probe = load_model(path, n_ctx=512, n_threads=threads, n_gpu_layers=0)
    template = ChatTemplate.from_model(probe)
    messages = messages_for(n_tokens, lambda text: len(
        chat_tokens(probe, template, [{"role": "user", "content": text}])))
    tokens = chat_tokens(probe, template, messages)
    probe.close()
    return messages, tokens


def timed_prefill(model: LlamaModel, tokens: list[int], warm: int = 0) -> Runner:
    """A run of the engine's chunked prefill of `tokens` and the first step (time to first
    token), in seconds, from a cache that holds the first `warm` of them (filled untimed from
    empty, the way an earlier turn would have)."""
    def run() -> float:
        model.truncate(0)
        fill_cache(model, tokens[:warm])
        t0 = time.perf_counter()
        fill_cache(model, tokens[:-1])
        model.eval(tokens[-1:], [-1])
        return time.perf_counter() - t0
    return run


def llama_runner(path: Path, n_ctx: int, threads: int, messages: list[dict[str, str]],
                 flash_attn: bool = False) -> Runner:
    llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          n_gpu_layers=0, flash_attn=flash_attn, verbose=False)

    def run() -> float:
        llm.reset()
        t0 = time.perf_counter()
        # The same role/content dicts the chat template takes; llama-cpp-python types each role.
        llm.create_chat_completion(cast("list[llama_cpp.ChatCompletionRequestMessage]", messages),
                                   max_tokens=1, temperature=0.0)
        return time.perf_counter() - t0
    return run


def specchat_runner(path: Path, n_ctx: int, threads: int, tokens: list[int],
                    context_overrides: dict[str, Any]) -> Runner:
    original = llama_cpp.llama_context_default_params

    def patched() -> Any:
        params = original()
        for key, value in context_overrides.items():
            setattr(params, key, value)
        return params
    llama_cpp.llama_context_default_params = patched
    try:
        model = load_model(path, n_ctx=n_ctx, n_threads=threads, n_gpu_layers=0,
                           n_batch=int(context_overrides.get("n_batch", 512)))
    finally:
        llama_cpp.llama_context_default_params = original
    return timed_prefill(model, tokens)


VARIANTS: dict[str, dict[str, Any]] = {
    "specchat": {},
    "specchat-fa-off": {"flash_attn_type": 0},
    "specchat-fa-on": {"flash_attn_type": 1},
    "specchat-ub256": {"n_batch": 256},
    "specchat-b1024": {"n_batch": 1024},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default="llama,specchat,specchat-fa-off")
    args = parser.parse_args()
    path = resolve_model(args.model)
    n_ctx = args.tokens + 1024
    messages, tokens = long_prompt(path, args.tokens, args.threads)
    n_tokens = len(tokens)
    runners: dict[str, Runner] = {}
    for name in args.variants.split(","):
        if name in ("llama", "llama-fa-on"):
            runners[name] = llama_runner(path, n_ctx, args.threads, messages,
                                         flash_attn=name == "llama-fa-on")
        else:
            runners[name] = specchat_runner(path, n_ctx, args.threads, tokens, VARIANTS[name])
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for rep in range(args.reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = runners[name]()
            times[name].append(seconds)
            print(f"round {rep + 1} {name}: {seconds:.2f}s", flush=True)
    print(f"prompt: {n_tokens} tokens (specchat's template), threads {args.threads}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:18s} median {median:6.2f}s  {n_tokens / median:6.1f} tok/s  "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
