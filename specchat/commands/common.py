"""Options shared by `ask`, `chat` and `bench`: one definition drives flags, env and help.

Every option can also come from SPECCHAT_<NAME> (e.g. SPECCHAT_TEMPERATURE=0.7).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from specchat.engine.options import GenerationOptions, OptionError, SamplingOptions
from specchat.errors import UsageError
from specchat.runtime import LoadSettings


def _opt(*names: str, env: str, help: str, **kw: object) -> typer.models.OptionInfo:
    return typer.Option(*names, envvar=f"SPECCHAT_{env}", help=help, **kw)  # type: ignore[arg-type]


Model = Annotated[Optional[str], _opt("--model", "-m", env="MODEL",
                  help="Target model: preset name or path to a .gguf file.")]
Draft = Annotated[Optional[str], _opt("--draft", "-d", env="DRAFT",
                  help="Draft model (preset or .gguf path); 'none' for no draft model.")]
Spec = Annotated[str, _opt("--spec", env="SPEC",
                 help="Speculation: auto (drafts only when it pays), draft, ngram, off.")]
DraftMax = Annotated[int, _opt("--draft-max", env="DRAFT_MAX",
                     help="Most tokens drafted per step.")]
Temperature = Annotated[float, _opt("--temperature", "-t", env="TEMPERATURE",
                        help="0 is greedy.")]
TopK = Annotated[int, _opt("--top-k", env="TOP_K", help="0 turns it off.")]
TopP = Annotated[float, _opt("--top-p", env="TOP_P", help="1 turns it off.")]
MinP = Annotated[float, _opt("--min-p", env="MIN_P", help="0 turns it off.")]
RepeatPenalty = Annotated[float, _opt("--repeat-penalty", env="REPEAT_PENALTY",
                          help="1 turns it off.")]
RepeatLastN = Annotated[int, _opt("--repeat-last-n", env="REPEAT_LAST_N",
                        help="Window of recent tokens the repeat penalty sees.")]
Seed = Annotated[Optional[int], _opt("--seed", env="SEED", help="Seed for reproducible sampling.")]
MaxTokens = Annotated[int, _opt("--max-tokens", "-n", env="MAX_TOKENS",
                      help="Most tokens in an answer.")]
Stop = Annotated[Optional[list[str]], _opt("--stop", env="STOP",
                 help="Stop string (repeatable); never printed.")]
Ctx = Annotated[int, _opt("--ctx", env="CTX",
                help="Context size in tokens; 0 means the model's trained context.")]
GpuLayers = Annotated[str, _opt("--n-gpu-layers", env="N_GPU_LAYERS",
                      help="Layers to offload to the GPU: auto (what fits in free memory), "
                           "a number, or -1 for all.")]
Threads = Annotated[Optional[int], _opt("--threads", env="THREADS", help="CPU threads.")]
System = Annotated[Optional[str], _opt("--system", "-s", env="SYSTEM", help="System prompt.")]
Verbose = Annotated[bool, _opt("--verbose", "-v", env="VERBOSE",
                    help="Show llama.cpp's own log and error details.")]


def load_settings(*, model: str | None, draft: str | None, spec: str, ctx: int,
                  n_gpu_layers: str | int | None, threads: int | None, verbose: bool,
                  quiet: bool = False) -> LoadSettings:
    """LoadSettings from the model flags; values llama.cpp would choke on are usage errors."""
    if ctx != 0 and ctx < 16:
        raise UsageError(f"--ctx {ctx} is too small: use at least 16 (e.g. 4096), or 0 for the "
                         f"model's trained context")
    if threads is not None and threads < 1:
        raise UsageError("--threads must be >= 1")
    return LoadSettings(model=model, draft=draft, spec=spec, n_ctx=ctx,
                        n_gpu_layers=parse_gpu_layers(n_gpu_layers), threads=threads,
                        verbose=verbose, quiet=quiet)


def parse_gpu_layers(value: str | int | None) -> int | None:
    """'auto' (or nothing) -> None, the runtime then sizes it; a number -> that number."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip().lower()
    if text in ("", "auto"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise UsageError(f"--n-gpu-layers {value!r}: use auto, a number of layers, or -1 for "
                         f"all") from None
    if number < -1:
        raise UsageError(f"--n-gpu-layers {number}: use auto, 0 or more, or -1 for all")
    return number


def generation_options(
    *, temperature: float, top_k: int, top_p: float, min_p: float, repeat_penalty: float,
    repeat_last_n: int, seed: int | None, max_tokens: int, stop: list[str] | None,
    spec: str, draft_max: int,
) -> GenerationOptions:
    """Build validated options; a bad value becomes a one-line usage error."""
    try:
        sampling = SamplingOptions(temperature=temperature, top_k=top_k, top_p=top_p,
                                   min_p=min_p, repeat_penalty=repeat_penalty,
                                   repeat_last_n=repeat_last_n, seed=seed)
        return GenerationOptions(sampling=sampling, max_tokens=max_tokens,
                                 stop=tuple(stop or ()), spec=spec, draft_max=draft_max)
    except OptionError as exc:
        raise UsageError(f"invalid option: {exc}") from None


DEFAULTS = GenerationOptions()
