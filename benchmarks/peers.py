"""specchat's modes beside llama-cpp-python's own speculation, same prompts (README.md).

    python benchmarks/peers.py [FILE] --categories summarization,rag --limit 3 -n 128 \
        -m qwen2.5-coder-1.5b [--draft qwen2.5-coder-0.5b] [--json out.json]

This script compares speculation implementations, each against its own plain decoding. The
plain decoder users actually call, `Llama.create_chat_completion` (its own chat template and
sampler), is timed by `specchat bench` itself (the `llama-cpp` row and `vs lcp` column,
specchat/bench/peer.py), measured the same way: tokens after the first over the time after it.

Peers: llama-cpp-python's high-level `Llama` without a draft (its baseline) and with
`LlamaPromptLookupDecoding(num_pred_tokens=2)` and `=10` (its default). specchat: off, ngram,
auto (and draft with --draft). Every program gets the very same prompt token ids (specchat's
chat template), greedy decoding, the same max tokens, 2 threads, CPU only by default; each
config runs from an empty cache and the order of configs rotates from prompt to prompt.

Decode speed is measured the same way for every program, from outside: tokens after the first
streamed token over the time after it, so prefill (and the first token) is left out. Speedup is
against the program's own no-speculation baseline: summed tokens over summed time, per
category. This script lives outside the package so that only specchat/llm/ imports
llama_cpp inside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from specchat.backend.loading import open_runtime
from specchat.backend.local import Runtime
from specchat.backend.tuning import measured_auto_state
from specchat.bench import prompts as bp
from specchat.bench.runner import mode_order
from specchat.engine.events import Chunk, drain
from specchat.engine.options import GenerationOptions, Spec
from specchat.errors import SpecchatError
from specchat.settings.load import LoadSettings

LCP_BASE = "lcp plain"
SPECCHAT_BASE = "specchat off"
Clock = Callable[[], float]


@dataclass
class Timed:
    """Tokens of one answer and when the first and last arrived (relative to the call)."""

    tokens: list[int] = field(default_factory=list)
    first_tokens: int = 0  # tokens that arrived with the first streamed piece
    first_at: float = 0.0
    end_at: float = 0.0

    @property
    def decode_tokens(self) -> int:
        return len(self.tokens) - self.first_tokens

    @property
    def decode_seconds(self) -> float:
        return self.end_at - self.first_at


@dataclass
class Config:
    name: str
    baseline: str
    run: Callable[[list[int], int], Timed]  # (prompt tokens, max tokens)


def lcp_configs(model_path: str, args: argparse.Namespace) -> list[Config]:
    """llama-cpp-python's plain Llama and its prompt-lookup speculation, loaded once each."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    common: dict[str, Any] = {
        "model_path": model_path, "n_ctx": args.ctx, "n_threads": args.threads,
        "n_threads_batch": args.threads, "n_gpu_layers": args.n_gpu_layers, "verbose": False}
    plain = Llama(**common)
    # A draft_model makes Llama keep logits for every position; logits_all=True must be
    # passed as well, or 0.3.36 sizes that array by n_batch and fails past 512 positions.
    # One such instance serves both lookup widths by swapping its draft_model between runs.
    lookup = Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=2), logits_all=True,
                   **common)

    def runner(llm: Any, num_pred: int | None) -> Callable[[list[int], int], Timed]:
        def run(prompt: list[int], max_tokens: int) -> Timed:
            if num_pred is not None:
                llm.draft_model = LlamaPromptLookupDecoding(num_pred_tokens=num_pred)
            return run_lcp(llm, prompt, max_tokens)
        return run

    return [Config(LCP_BASE, LCP_BASE, runner(plain, None)),
            Config("lcp lookup k=2", LCP_BASE, runner(lookup, 2)),
            Config("lcp lookup k=10", LCP_BASE, runner(lookup, 10))]


def run_lcp(llm: Any, prompt: list[int], max_tokens: int,
            clock: Clock = time.perf_counter) -> Timed:
    import llama_cpp

    llm.reset()  # n_tokens = 0: no prefix reuse, the full prompt is evaluated like specchat's
    vocab = llm._model.vocab
    timed = Timed()
    start = clock()
    for token in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0, reset=True):
        timed.tokens.append(int(token))
        if len(timed.tokens) == 1:
            timed.first_tokens, timed.first_at = 1, clock() - start
        if llama_cpp.llama_vocab_is_eog(vocab, token) or len(timed.tokens) >= max_tokens:
            break
    timed.end_at = clock() - start
    return timed


def specchat_configs(runtime: Runtime, modes: Sequence[str], draft_max: int) -> list[Config]:
    def runner(mode: str) -> Callable[[list[int], int], Timed]:
        def run(prompt: list[int], max_tokens: int) -> Timed:
            options = GenerationOptions(max_tokens=max_tokens, spec=Spec(mode), draft_max=draft_max)
            return run_specchat(runtime, prompt, options)
        return run
    return [Config(f"specchat {m}", SPECCHAT_BASE, runner(m)) for m in modes]


def run_specchat(runtime: Runtime, prompt: list[int], options: GenerationOptions,
                 clock: Clock = time.perf_counter) -> Timed:
    runtime.target.truncate(0)
    if runtime.draft is not None:
        runtime.draft.truncate(0)
    timed = Timed()
    start = clock()

    def on_chunk(chunk: Chunk) -> None:
        if chunk.tokens and not timed.first_tokens:
            timed.first_tokens, timed.first_at = len(chunk.tokens), clock() - start

    finished = drain(runtime.stream(prompt, options), on_chunk)
    if finished is not None:
        timed.tokens = list(finished.tokens)
    timed.end_at = clock() - start
    return timed


def run_all(configs: Sequence[Config], tokenized: Sequence[tuple[bp.BenchPrompt, list[int]]],
            max_tokens: int, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every prompt through every config, rotating the order; a short warm-up first."""
    for config in configs:
        config.run(min((t for _, t in tokenized), key=len), 8)
    rows: list[dict[str, Any]] = []
    for index, (prompt, tokens) in enumerate(tokenized):
        by_name = {c.name: c for c in configs}
        results = {}
        for name in mode_order([c.name for c in configs], index):
            progress(f"{prompt.category} {prompt.question_id} [{name}]")
            results[name] = by_name[name].run(tokens, max_tokens)
        for name, timed in results.items():
            base = results[by_name[name].baseline]
            rows.append({
                "question_id": prompt.question_id, "category": prompt.category,
                "config": name, "baseline": by_name[name].baseline,
                "tokens": len(timed.tokens), "decode_tokens": timed.decode_tokens,
                "decode_seconds": timed.decode_seconds, "first_seconds": timed.first_at,
                "matches_baseline": timed.tokens == base.tokens,
            })
    return rows


def summarize(rows: Sequence[dict[str, Any]],
              names: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per category (and overall): summed decode tokens / summed decode seconds per config,
    configs in the order of `names` (the rows come in rotated order)."""
    sums: dict[str, dict[str, dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: names.index(r["config"])):
        for key in (row["category"], "overall"):
            s = sums.setdefault(key, {}).setdefault(row["config"], {
                "baseline": row["baseline"], "prompts": 0, "decode_tokens": 0,
                "decode_seconds": 0.0, "matched": 0})
            s["prompts"] += 1
            s["decode_tokens"] += row["decode_tokens"]
            s["decode_seconds"] += row["decode_seconds"]
            s["matched"] += int(row["matches_baseline"])
    sums["overall"] = sums.pop("overall")
    for by_config in sums.values():
        for s in by_config.values():
            s["tokens_per_second"] = (s["decode_tokens"] / s["decode_seconds"]
                                      if s["decode_seconds"] > 0 else None)
        for s in by_config.values():
            base = by_config[s["baseline"]]["tokens_per_second"]
            mine = s["tokens_per_second"]
            s["speedup"] = mine / base if mine is not None and base else None
    return sums


def render(console: Console, sums: dict[str, dict[str, dict[str, Any]]]) -> None:
    for category, by_config in sums.items():
        table = Table(title=category, title_justify="left", box=box.SIMPLE_HEAD)
        for name in ("program / mode", "n", "decode tok", "tok/s", "vs own baseline",
                     "= baseline"):
            table.add_column(name, justify="left" if name == "program / mode" else "right")
        for name, s in by_config.items():
            tps, speedup = s["tokens_per_second"], s["speedup"]
            table.add_row(name, str(s["prompts"]), str(s["decode_tokens"]),
                          "-" if tps is None else f"{tps:.1f}",
                          "-" if speedup is None else f"{speedup:.2f}x",
                          f"{s['matched']}/{s['prompts']}")
        console.print(table)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", type=Path, help="Spec-Bench JSONL (default: built-in)")
    p.add_argument("--categories", help="comma-separated categories")
    p.add_argument("--limit", type=int, help="at most N prompts per category")
    p.add_argument("-m", "--model", default="qwen2.5-coder-1.5b", help="preset or .gguf")
    p.add_argument("-d", "--draft", help="draft model for specchat's draft mode")
    p.add_argument("--modes", default="off,ngram,auto", help="specchat modes (off is added)")
    p.add_argument("-n", "--max-tokens", type=int, default=128)
    p.add_argument("--draft-max", type=int, default=16)
    p.add_argument("--ctx", type=int, default=2048, help="context of every model (the "
                   "lookup peer keeps ctx x vocab logits: 1.2 GB for Qwen at 2048)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-gpu-layers", type=int, default=0)
    p.add_argument("--json", type=Path, help="write every run and the sums here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(parse_args(argv))
    except SpecchatError as exc:
        print(f"peers: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _main(args: argparse.Namespace) -> int:
    chosen = bp.select(bp.load_prompts(args.file), bp.parse_categories(args.categories),
                       args.limit)
    modes = ["off", *dict.fromkeys(m.strip() for m in args.modes.split(",")
                                   if m.strip() and m.strip() != "off")]
    if args.draft is None:
        modes = [m for m in modes if m != "draft"]
    settings = LoadSettings(model=args.model, draft=args.draft or "none",
                            spec=Spec.DRAFT if args.draft else Spec.NGRAM, n_ctx=args.ctx,
                            n_gpu_layers=args.n_gpu_layers, threads=args.threads)
    err = Console(stderr=True)
    with open_runtime(settings) as runtime:
        if runtime.tuned is not None:  # auto's costs, as a user gets them
            runtime.auto, closers = measured_auto_state(runtime.tuned)
            runtime.closers[:0] = closers
        tokenized = [(p, t) for p in chosen
                     if len(t := runtime.chat_tokens([{"role": "user", "content": p.text}]))
                     + args.max_tokens + 16 <= args.ctx]  # +16: room for a last draft
        if len(tokenized) < len(chosen):
            err.print(f"skipped {len(chosen) - len(tokenized)} prompts longer than --ctx")
        configs = [*lcp_configs(runtime.info.target_path, args),
                   *specchat_configs(runtime, modes, args.draft_max)]
        with err.status("warming up") as status:
            rows = run_all(configs, tokenized, args.max_tokens,
                           status.update)
    sums = summarize(rows, [c.name for c in configs])
    render(Console(), sums)
    if args.json:
        args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                         "rows": rows, "summary": sums}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
