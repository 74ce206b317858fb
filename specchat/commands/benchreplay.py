"""`specchat bench --record` and `specchat bench --cost-profile`: acceptance recorded once
with the real models, then replayed on any machine's cost profile (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path

from rich.console import Console

from specchat.backend.loading import open_runtime
from specchat.bench import profiles
from specchat.bench import prompts as bp
from specchat.bench import recording as rec
from specchat.bench.priced import priced_bench
from specchat.bench.pricedreport import render_priced
from specchat.bench.runner import parse_modes
from specchat.commands.common import write_report
from specchat.engine.options import Spec
from specchat.errors import UsageError
from specchat.settings.file import Settings
from specchat.settings.load import LoadSettings


def record_command(settings: Settings, file: Path | None, chosen: list[bp.BenchPrompt],
                   max_tokens: int, out: Path) -> None:
    """Answer every prompt with the target (greedy, plain) and teacher-force the draft."""
    if str(out) == "-":
        raise UsageError("--record needs a file name (the recording is JSON for "
                         "--recording FILE)")
    if settings.get("temperature"):
        raise UsageError("--record records greedy answers: leave --temperature at 0")
    loading = replace(LoadSettings.from_settings(settings), spec=Spec.DRAFT)
    source = file.name if file else f"<built-in {bp.BUILTIN_NAME}>"

    def tell(item: rec.Recorded) -> None:
        agree = sum(a == d for a, d in zip(item.answer, item.draft or (), strict=False))
        print(f"specchat: recorded {item.category} {item.question_id}: {len(item.prompt)} + "
              f"{len(item.answer)} tokens ({item.finish}), draft agrees on {agree}",
              file=sys.stderr)

    with open_runtime(loading) as runtime:
        recorded = rec.record(runtime, chosen, max_tokens, source, listener=tell)
    if not recorded.items:
        raise UsageError("no prompt fitted in the context: raise --ctx or lower --max-tokens")
    rec.save(recorded, out)
    print(f"specchat: wrote {out} ({len(recorded.items)} prompts)", file=sys.stderr)


BUILTIN_RECORDINGS = ("builtin", "spec-bench")  # specchat/bench/recordings/NAME.json


def replay_command(profile_name: str | None, recording_name: str | None,
                   categories: str | None, limit: int | None, modes: str | None,
                   json_file: str | None, draft_max: int, oracles: bool = True) -> None:
    """Replay recorded acceptance on a cost profile: every mode, the best fixed policies and
    the per-step oracle; a table on stdout (or JSON with --json -)."""
    if profile_name is None:
        raise UsageError("--recording replays on a cost profile: add --cost-profile FILE "
                         f"(built-in: {', '.join(profiles.builtin_names())})")
    profile = profiles.load(profile_name)
    recorded = load_recording(recording_name).select(bp.parse_categories(categories), limit)
    specs = [Spec(m) for m in parse_modes(modes, DEFAULT_PRICED_MODES)]
    console = Console(stderr=json_file == "-")
    with _progress(console) as tell:
        result = priced_bench(recorded, profile, specs, draft_max=draft_max, oracles=oracles,
                              listener=tell)
    render_priced(console, result)
    if json_file is not None:  # no one's words: prices of a built-in or given recording
        write_report(json_file, json.dumps(result.to_dict(), indent=1), private=False)


DEFAULT_PRICED_MODES = (Spec.NGRAM, Spec.DRAFT, Spec.AUTO)


def load_recording(name: str | None) -> rec.Recording:
    """A recording file, or a built-in recording by name (default: the built-in set's)."""
    name = name or BUILTIN_RECORDINGS[0]
    if os.path.lexists(name) or name not in BUILTIN_RECORDINGS:
        return rec.load(Path(name))
    text = resources.files("specchat.bench").joinpath("recordings", f"{name}.json")
    return rec.parse(json.loads(text.read_text(encoding="utf-8")), name)


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[str], None]]:
    """What is being replayed, on stderr when it is a terminal."""
    status = Console(stderr=True)
    if not status.is_terminal:
        yield lambda _: None
        return
    with status.status("replaying") as live:
        yield lambda what: live.update(f"replaying {what}")
