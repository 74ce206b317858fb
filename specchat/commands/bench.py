"""`specchat bench`: every prompt through every mode, one process, tables and JSON.

stdout carries the tables (or the JSON with `--json -`); the progress bar and notes go to
stderr. Bad input (file, line, category, mode) fails before any model is loaded.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from specchat import fileio
from specchat.backend.loading import open_runtime
from specchat.backend.local import Runtime
from specchat.backend.promptcache import PromptCache
from specchat.backend.tuning import measured_auto_state
from specchat.bench import prompts as bp
from specchat.bench import ttft
from specchat.bench.peer import ChatCompletionPeer
from specchat.bench.report import (
    ceiling_summary,
    print_calibration,
    render,
    render_ceiling,
    summarize,
    to_json,
)
from specchat.bench.runner import BenchResult, Step, parse_modes, run_bench
from specchat.commands import common as c
from specchat.commands.benchreplay import record_command, replay_command
from specchat.engine.options import GenerationOptions, Spec
from specchat.errors import EXIT_INTERRUPTED, ModelError, SpecchatError, UsageError
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.load import LoadSettings
from specchat.settings.schema import MODEL, group

DEFAULT_MODES = (Spec.AUTO, Spec.NGRAM, Spec.DRAFT)
DEFAULT_MAX_TOKENS = 128


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("bench", help="Benchmark speculation modes against plain decoding on a set "
                "of prompts (Spec-Bench JSONL, or the built-in set).")(bench)


BENCH_OPTIONS = (*group(MODEL), "temperature", "seed", "draft_max", "max_tokens")


@with_options(BENCH_OPTIONS, defaults={"max_tokens": DEFAULT_MAX_TOKENS, "temperature": 0.0},
              # A SPECCHAT_TEMPERATURE or config file meant for chat must not turn the
              # benchmark sampled or change its length.
              flag_only=("temperature", "max_tokens"))
def bench(
    file: Annotated[Optional[Path], typer.Argument(
        help="Spec-Bench style JSON Lines (question_id, category, turns); default: the "
        "built-in set.", show_default=False)] = None,
    categories: Annotated[Optional[str], typer.Option(
        "--categories", help="Comma-separated categories to run (default: all).")] = None,
    limit: Annotated[Optional[int], typer.Option(
        "--limit", help="At most N prompts per category.")] = None,
    modes: Annotated[Optional[str], typer.Option(
        "--modes", help="Comma-separated modes besides off (always run): auto, ngram, draft. "
        "Default: auto,ngram,draft (draft only when a draft model is loaded).")] = None,
    json_file: Annotated[Optional[str], typer.Option(
        "--json", help="Write every run and the sums as JSON to FILE ('-': stdout, tables "
        "then go to stderr).", metavar="FILE")] = None,
    warmup: Annotated[bool, typer.Option(
        "--warmup/--no-warmup", help="A few untimed tokens in every mode first.")] = True,
    peer: Annotated[bool, typer.Option(
        "--llama-cpp/--no-llama-cpp", help="Also time llama-cpp-python's own "
        "create_chat_completion on the same GGUF and threads (column 'vs lcp').")] = True,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate", help="Measure and print what a verify batch costs here (and the "
        "break-even acceptance), then exit.")] = False,
    json_schemas: Annotated[bool, typer.Option(
        "--json-schemas", help="Run the built-in set of JSON-schema prompts: every answer "
        "constrained to JSON that matches its schema.")] = False,
    record_file: Annotated[Optional[str], typer.Option(
        "--record", metavar="FILE", help="Record acceptance instead of timing: the target's "
        "greedy answers and the draft's proposal at every position, as JSON for "
        "--cost-profile replays.")] = None,
    cost_profile: Annotated[Optional[str], typer.Option(
        "--cost-profile", metavar="FILE", help="Replay recorded acceptance on this cost "
        "profile (a JSON file, or a built-in profile's name) instead of running models.")
    ] = None,
    recording: Annotated[Optional[str], typer.Option(
        "--recording", metavar="FILE", help="What --cost-profile replays: a recording file "
        "or a built-in one's name (default: the built-in set's).")] = None,
    sessions: Annotated[bool, typer.Option(
        "--sessions", help="FILE holds sessions of related requests, answered in order "
        "(default: the built-in session set); --modes defaults to auto, --limit counts "
        "requests per session, --categories picks sessions.")] = False,
    via: Annotated[str, typer.Option(
        "--via", help="With --sessions: ask (each request a fresh `specchat ask` process, "
        "as a shell loop) or serve (one `specchat serve` per mode).")] = "ask",
    rounds: Annotated[int, typer.Option(
        "--rounds", min=1, help="Answer the prompts (or run the sessions, from empty "
        "stores) this many times over, the modes interleaved per prompt; speedups' 95% "
        "intervals pair each prompt's runs per round.")] = 1,
    *, settings: Settings,
) -> None:
    replaying = _check_runs(file, record_file, calibrate, cost_profile, recording, sessions,
                            rounds)
    _check_writable(json_file)
    _check_writable(record_file, "--record")
    if sessions:
        from specchat.commands.bench_sessions import bench_sessions

        bench_sessions(file, categories, limit, modes, json_file, peer, via, settings, rounds)
        return
    if replaying:
        replay_command(cost_profile, recording, categories, limit, modes, json_file,
                       draft_max=settings["draft_max"])
        return
    options = c.options_from(settings).with_values(spec=Spec.OFF)
    ctx = settings["ctx"]
    mode_list = parse_modes(modes, DEFAULT_MODES)
    if json_schemas and file is not None:
        raise UsageError("--json-schemas runs the built-in JSON set: leave out the file (a "
                         "file's lines may carry a \"schema\" of their own)")
    builtin = bp.JSON_NAME if json_schemas else bp.BUILTIN_NAME
    chosen = [] if calibrate else _chosen_prompts(file, categories, limit, builtin)
    if record_file is not None:
        record_command(settings, file, chosen, options.max_tokens, Path(record_file))
        return
    # Single prompts: no drafting store (earlier runs' answers would answer for them).
    loading = replace(LoadSettings.from_settings(settings, quiet=json_file == "-"),
                      spec=_load_spec(mode_list, calibrate), draft_history=False)
    with open_runtime(loading) as runtime:
        if calibrate:
            _calibrate(runtime, loading)
            return
        mode_list = _available_modes(runtime, mode_list, explicit=modes is not None)
        plain = _plain_peer(runtime, loading) if peer else None
        if plain is not None:
            mode_list = [*mode_list, plain.name]
        result = _timed(runtime, chosen, mode_list, options, plain, warmup, rounds)
        described = _settings(file, categories, limit, mode_list, options, runtime, ctx)
        if json_schemas:
            described["file"] = f"<built-in {bp.JSON_NAME}>"
        described["ceiling"] = ceiling_summary(runtime.auto)
    _report(result, mode_list, described, json_file, greedy=options.sampling.greedy)
    if not result.records and not result.interrupted:
        raise SpecchatError("no prompt fitted in the context: raise --ctx or lower --max-tokens")
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def _calibrate(runtime: Runtime, loading: LoadSettings) -> None:
    """`--calibrate`: measure afresh, keep what was measured, print it."""
    if runtime.tuned is None:
        raise ModelError("these models cannot be calibrated")
    tuned = replace(runtime.tuned, settings=replace(loading, quiet=False))
    state, closers = measured_auto_state(tuned, force=True)
    runtime.closers[:0] = closers  # what was measured and learnt is kept
    print_calibration(Console(), state, runtime.info.target_name, runtime.info.draft_name)


def _timed(runtime: Runtime, chosen: list[bp.BenchPrompt], mode_list: list[str],
           options: GenerationOptions, plain: ChatCompletionPeer | None, warmup: bool,
           rounds: int) -> BenchResult:
    """Every prompt in every mode, timed, under a progress bar; a private prompt cache that
    ends with the run."""
    with _progress(len(chosen) * len(mode_list) * rounds) as listener, \
            tempfile.TemporaryDirectory(prefix="specchat-bench-") as cache_dir:
        return run_bench(runtime, chosen, mode_list, options, listener=listener,
                         warmup=warmup, peer=plain, rounds=rounds,
                         prompt_cache=PromptCache(Path(cache_dir), min_new_tokens=0))


def _check_runs(file: Path | None, record_file: str | None, calibrate: bool,
                cost_profile: str | None, recording: str | None, sessions: bool = False,
                rounds: int = 1) -> bool:
    """Which kind of run the flags ask for (True: a priced replay); flags of two kinds are a
    usage error rather than one of them being ignored."""
    if sessions and (cost_profile is not None or recording is not None or
                     record_file is not None or calibrate):
        raise UsageError("--sessions runs sessions of requests: leave out --cost-profile, "
                         "--recording, --record and --calibrate")
    once = ("--cost-profile" if cost_profile is not None or recording is not None else
            "--record" if record_file is not None else "--calibrate" if calibrate else None)
    if rounds > 1 and once is not None:
        raise UsageError(f"{once} runs once (a replay repeats exactly; a recording and a "
                         "calibration are taken once): leave out --rounds")
    if cost_profile is not None or recording is not None:
        if file is not None or record_file is not None or calibrate:
            raise UsageError("--cost-profile replays a recording (--recording FILE); it runs "
                             "no model: leave out the prompts file, --record and --calibrate")
        return True
    if record_file is not None and calibrate:
        raise UsageError("--record and --calibrate are separate runs: choose one")
    return False


def _plain_peer(runtime: Runtime, loading: LoadSettings) -> ChatCompletionPeer | None:
    """llama-cpp-python's Llama on the target's file, with specchat's thread count; closed
    with the runtime. None (with a note) when it cannot load that file."""
    from specchat.llm import plain_chat_llama
    from specchat.llm.ggml import default_threads

    try:
        llm = plain_chat_llama(runtime.info.target_path, n_ctx=runtime.target.n_ctx,
                               n_threads=loading.threads or default_threads(),
                               n_gpu_layers=loading.n_gpu_layers)
    except (ModelError, ValueError) as exc:
        print(f"specchat: note: the llama-cpp baseline is left out: {exc}", file=sys.stderr)
        return None
    runtime.closers.append(llm.close)
    return ChatCompletionPeer(llm)


def _chosen_prompts(file: Path | None, categories: str | None, limit: int | None,
                    builtin: str = bp.BUILTIN_NAME) -> list[bp.BenchPrompt]:
    chosen = bp.select(bp.load_prompts(file, builtin), bp.parse_categories(categories), limit)
    if not chosen:
        raise UsageError("no prompts selected")
    return chosen


def _check_writable(json_file: str | None, flag: str = "--json") -> None:
    """Fail before a long run, not after it, when the file could not be written: a missing
    folder, or a directory, a device or a FIFO where the file would go."""
    if json_file is None or json_file == "-":
        return
    parent = Path(json_file).resolve().parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {json_file}: folder {parent} does not exist")
    if Path(json_file).is_dir():
        raise UsageError(f"{flag} {json_file} is a directory")
    try:
        fileio.write_target(Path(json_file))
    except fileio.FileIOError as exc:
        raise UsageError(f"{flag}: {exc}; give a new file's name") from None


def _load_spec(modes: list[str], calibrate: bool) -> Spec:
    """The spec that makes open_runtime load a draft model exactly when a mode needs one."""
    if Spec.DRAFT in modes or calibrate:
        return Spec.DRAFT
    return Spec.AUTO if Spec.AUTO in modes else Spec.NGRAM


def _available_modes(runtime: Runtime, modes: list[str], explicit: bool) -> list[str]:
    if Spec.DRAFT not in modes or runtime.draft is not None:
        return modes
    if explicit:
        raise UsageError("--modes draft needs a draft model: pass --draft NAME_OR_PATH, or "
                         "leave draft out of --modes")
    print("specchat: note: no draft model loaded, so mode draft is left out", file=sys.stderr)
    return [m for m in modes if m != Spec.DRAFT]


@contextmanager
def _progress(total: int) -> Iterator[Any]:
    """A rich progress bar on stderr; silent when stderr is not a terminal."""
    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True,
                        disable=not console.is_terminal)
    task = progress.add_task("bench", total=total)

    def listener(step: Step) -> None:
        if step.record is None:
            progress.update(task, description=f"{step.prompt.category} "
                            f"{step.prompt.question_id} [{step.mode}]")
        else:
            progress.advance(task)

    with progress:
        yield listener


def _settings(file: Path | None, categories: str | None, limit: int | None,
              modes: list[str], options: Any, runtime: Runtime, ctx: int) -> dict[str, Any]:
    return {
        "file": str(file) if file else f"<built-in {bp.BUILTIN_NAME}>",
        "categories": bp.parse_categories(categories), "limit": limit, "modes": modes,
        "max_tokens": options.max_tokens, "temperature": options.sampling.temperature,
        "seed": options.sampling.seed, "draft_max": options.draft_max, "ctx": ctx,
        "model": runtime.info.target_name, "model_path": runtime.info.target_path,
        "draft": runtime.info.draft_name, "draft_path": runtime.info.draft_path,
    }


def _report(result: BenchResult, modes: list[str], settings: dict[str, Any],
            json_file: str | None, greedy: bool) -> None:
    to_stdout = json_file == "-"
    console = Console(stderr=to_stdout)
    for skip in result.skipped:
        print(f"specchat: note: skipped {skip.category} {skip.question_id}: {skip.reason}",
              file=sys.stderr)
    if result.interrupted:
        print("specchat: interrupted: the tables cover the prompts completed in every mode",
              file=sys.stderr)
    render(console, summarize(result.records, modes), greedy)
    ttft.render(console, result.first_tokens)
    render_ceiling(console, settings["ceiling"])
    if json_file is None:
        return
    # Private: it holds the prompts and the answers.
    c.write_report(json_file, json.dumps(to_json(result, modes, settings), ensure_ascii=False,
                                         indent=1))
