"""`specchat bench` on fake models: prompt files, fair ordering, the arithmetic, JSON, exit codes.

Speeds come from scripted Stats and an injected clock, never from real timing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from specchat.backend.local import Runtime
from specchat.backend.tuning import Calibration, Tuned
from specchat.bench import prompts as bp
from specchat.bench.report import OVERALL, summarize, to_json
from specchat.bench.runner import (
    BenchResult,
    mark_greedy_matches,
    mode_order,
    parse_modes,
    run_bench,
)
from specchat.commands import bench as bench_cmd
from specchat.engine.events import Event
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from tests.support.benchruns import record, scripted, small_prompts
from tests.support.clirun import run_cli
from tests.support.fake_runtime import fake_model, fake_runtime

LINES = [
    {"question_id": 1, "category": "writing", "turns": ["Write a poem.", "Again."]},
    {"question_id": 2, "category": "writing", "turns": ["Write a haiku."]},
    {"question_id": 3, "category": "qa", "turns": ["Why is the sky blue?"]},
    {"question_id": "r1", "category": "rag", "turns": ["Passage: x. Question: y?"]},
    {"question_id": 5, "category": "qa", "turns": ["What is rust?"]},
]


def write_jsonl(path: Path, lines: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


# --- prompts -------------------------------------------------------------------------------

def test_load_uses_first_turn_and_keeps_file_order(tmp_path: Path) -> None:
    prompts = bp.load_prompts(write_jsonl(tmp_path / "q.jsonl", LINES))
    assert [p.question_id for p in prompts] == ["1", "2", "3", "r1", "5"]
    assert prompts[0].text == "Write a poem."
    assert bp.categories_of(prompts) == ["writing", "qa", "rag"]


def test_select_filters_categories_and_limits_each(tmp_path: Path) -> None:
    prompts = bp.load_prompts(write_jsonl(tmp_path / "q.jsonl", LINES))
    chosen = bp.select(prompts, ["qa", "writing"], limit=1)
    assert [(p.category, p.question_id) for p in chosen] == [("writing", "1"), ("qa", "3")]
    assert len(bp.select(prompts)) == 5


def test_unknown_category_lists_the_known_ones(tmp_path: Path) -> None:
    prompts = bp.load_prompts(write_jsonl(tmp_path / "q.jsonl", LINES))
    with pytest.raises(UsageError, match=r"unknown category poetry; this file has: "
                                         r"writing, qa, rag"):
        bp.select(prompts, ["poetry"])


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"q.jsonl:2: invalid JSON"),
    ('{"question_id": 9, "category": "qa"}', r"q.jsonl:2: missing turns"),
    ('{"question_id": 9, "category": "qa", "turns": []}', r"q.jsonl:2: turns must"),
    ('[1, 2]', r"q.jsonl:2: expected a JSON object"),
])
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match=message):
        bp.load_prompts(path)


def test_builtin_set_has_the_promised_categories() -> None:
    prompts = bp.load_prompts(None)
    assert len(prompts) >= 12
    assert {"code-edit", "summarization", "rag", "writing", "qa"} <= set(bp.categories_of(prompts))
    for prompt in (p for p in prompts if p.category == "code-edit"):
        code = prompt.text.split("```")[1].splitlines()
        assert 20 <= len(code) <= 62, prompt.question_id  # quotes enough code to be copied


# --- modes and ordering ----------------------------------------------------------------------

def test_parse_modes_puts_off_first_once() -> None:
    assert parse_modes("ngram,off,auto,ngram", ()) == ["off", "ngram", "auto"]
    assert parse_modes(None, ("auto", "draft")) == ["off", "auto", "draft"]
    with pytest.raises(UsageError, match=r"unknown mode turbo; choose from auto, draft"):
        parse_modes("auto,turbo", ())


def test_mode_order_rotates_so_each_mode_leads_equally_often() -> None:
    modes = ["off", "ngram", "auto"]
    orders = [mode_order(modes, i) for i in range(6)]
    assert orders[:3] == [["off", "ngram", "auto"], ["ngram", "auto", "off"],
                          ["auto", "off", "ngram"]]
    assert all(sorted(o) == sorted(modes) for o in orders)
    assert [o[0] for o in orders].count("auto") == 2


# --- runner on a scripted engine ------------------------------------------------------------

def test_runner_alternates_modes_and_empties_caches() -> None:
    calls: list[tuple[str, int]] = []
    runtime = scripted(fake_runtime(), calls)
    options = GenerationOptions(max_tokens=20, spec="off")
    result = run_bench(runtime, small_prompts(3), ["off", "ngram", "auto"], options,
                       warmup=False)
    assert [c[0] for c in calls] == ["off", "ngram", "auto", "ngram", "auto", "off",
                                     "auto", "off", "ngram"]
    assert all(cached == 0 for _, cached in calls)  # each run starts from an empty cache
    assert [(r.question_id, r.mode, r.position) for r in result.records][3:6] == [
        ("1", "ngram", 0), ("1", "auto", 1), ("1", "off", 2)]


def test_warmup_runs_every_mode_briefly_before_timing() -> None:
    calls: list[tuple[str, int]] = []
    runtime = scripted(fake_runtime(), calls)
    result = run_bench(runtime, small_prompts(1), ["off", "ngram"],
                       GenerationOptions(max_tokens=20, spec="off"))
    assert [c[0] for c in calls] == ["off", "ngram", "off", "ngram"]
    assert len(result.records) == 2  # the warm-up is not recorded


def test_injected_clock_times_first_chunk_and_whole_call() -> None:
    ticks = iter([10.0, 10.5, 13.0])
    runtime = scripted(fake_runtime(), [])
    result = run_bench(runtime, small_prompts(1), ["off"], GenerationOptions(max_tokens=20),
                       warmup=False, clock=lambda: next(ticks))
    record = result.records[0]
    assert (record.first_chunk_seconds, record.wall_seconds) == (0.5, 3.0)
    assert record.decode_seconds == 2.0  # speed comes from the engine's decode time


def test_prompts_that_do_not_fit_are_skipped_with_a_reason() -> None:
    runtime = scripted(fake_runtime(target=fake_model(n_ctx=64)), [])
    long_one = bp.BenchPrompt("big", "qa", "x" * 100)
    result = run_bench(runtime, [long_one, *small_prompts(1)], ["off"],
                       GenerationOptions(max_tokens=20, spec="off"), warmup=False)
    assert [s.question_id for s in result.skipped] == ["big"]
    assert "exceed --ctx 64" in result.skipped[0].reason
    assert [r.question_id for r in result.records] == ["0"]


# --- arithmetic and greedy matching ---------------------------------------------------------

def test_speedup_is_summed_tokens_over_summed_time() -> None:
    records = [record("1", "off", 100, 10.0), record("2", "off", 10, 0.5),
               record("1", "ngram", 100, 5.0, steps=40, drafted=90, accepted=60),
               record("2", "ngram", 10, 1.0, steps=10, drafted=10, accepted=0)]
    summary = summarize(records, ["off", "ngram"])
    off, ngram = summary[OVERALL]["off"], summary[OVERALL]["ngram"]
    assert off.tokens_per_second == pytest.approx(110 / 10.5)
    assert ngram.tokens_per_second == pytest.approx(110 / 6.0)
    # Spec-Bench's ratio of sums, not the mean of per-prompt ratios (which would be 1.25).
    assert ngram.speedup(off) == pytest.approx((110 / 6.0) / (110 / 10.5))
    assert ngram.tokens_per_step == pytest.approx(110 / 50)
    assert ngram.acceptance == pytest.approx(60 / 100)
    assert off.acceptance is None


def test_greedy_match_reports_first_divergence() -> None:
    runs = [record("1", "off", 5, 1, tokens=[1, 2, 3, 4, 5]),
            record("1", "ngram", 5, 1, tokens=[1, 2, 3, 4, 5]),
            record("1", "auto", 5, 1, tokens=[1, 2, 9, 4, 5]),
            record("1", "draft", 3, 1, tokens=[1, 2, 3])]
    mark_greedy_matches(runs, greedy=True)
    assert [(r.matched_off, r.first_divergence) for r in runs] == [
        (None, None), (True, None), (False, 2), (False, 3)]
    summary = summarize(runs, ["off", "ngram", "auto", "draft"])[OVERALL]
    assert (summary["auto"].matched, summary["auto"].compared) == (0, 1)
    assert summary["auto"].divergences == [("1", 2)]


def test_sampled_runs_are_not_compared() -> None:
    runs = [record("1", "off", 2, 1, tokens=[1, 2]), record("1", "ngram", 2, 1, tokens=[3, 4])]
    mark_greedy_matches(runs, greedy=False)
    assert runs[1].matched_off is None


def test_json_document_schema() -> None:
    records = [record("1", "off", 10, 1.0, tokens=[1]), record("1", "ngram", 10, 0.5,
                                                               tokens=[1])]
    mark_greedy_matches(records, greedy=True)
    doc = to_json(BenchResult(records=records), ["off", "ngram"], {"max_tokens": 10})
    assert set(doc) == {"schema", "settings", "modes", "interrupted", "skipped", "records",
                        "summary", "first_token"}
    assert set(doc["summary"]) == {"qa", OVERALL}
    assert doc["summary"][OVERALL]["ngram"]["speedup"] == pytest.approx(2.0)
    assert doc["records"][1]["matched_off"] is True
    json.dumps(doc)  # plain JSON all the way down


# --- the command ------------------------------------------------------------------------------

@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    made: dict[str, Any] = {"draft": None, "calls": []}

    def open_fake(settings: Any) -> Runtime:
        made["settings"] = settings
        runtime = fake_runtime(target=fake_model(n_ctx=8192), draft=made["draft"])
        runtime.tuned = Tuned(runtime.target, runtime.draft, Path("/fake.gguf"),  # type: ignore[arg-type]
                              Path("/fake-draft.gguf") if made["draft"] else None, settings,
                              Calibration(settings))
        made["runtime"] = runtime
        return runtime

    monkeypatch.setattr(bench_cmd, "open_runtime", open_fake)
    return made


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run_cli(args, capsys)


def test_cli_end_to_end_on_fake_models(opened: dict, tmp_path: Path, capsys: Any) -> None:
    path = write_jsonl(tmp_path / "q.jsonl", LINES)
    opened["draft"] = fake_model()  # the draft equals the target: every draft is accepted
    out_json = tmp_path / "out.json"
    code, out, err = run(["bench", str(path), "--limit", "1", "--modes", "ngram,draft",
                          "-n", "12", "--json", str(out_json)], capsys)
    assert code == 0, err
    assert "writing" in out and "overall" in out and "speedup" in out
    doc = json.loads(out_json.read_text())
    assert len(doc["records"]) == 3 * 3  # 3 categories x 1 prompt x (off, ngram, draft)
    drafted = [r for r in doc["records"] if r["mode"] == "draft"]
    assert all(r["matched_off"] for r in drafted)  # greedy speculation is exact on fakes
    assert doc["settings"]["modes"] == ["off", "ngram", "draft"]
    ceiling = doc["settings"]["ceiling"]  # (k+1)/cost(k+1) from the runtime's cost table
    assert set(ceiling) == {"1", "2", "3", "4", "8", "16"} and all(v > 0 for v in ceiling.values())
    assert "ceiling here" in out and f"{ceiling['3']:.2f}x at k=3" in out
    assert out_json.stat().st_mode & 0o777 == 0o600  # it holds the prompts and answers


def test_cli_json_to_stdout_moves_tables_to_stderr(opened: dict, tmp_path: Path,
                                                   capsys: Any) -> None:
    path = write_jsonl(tmp_path / "q.jsonl", LINES[:1])
    code, out, err = run(["bench", str(path), "--modes", "ngram", "-n", "4", "--json", "-"],
                         capsys)
    assert code == 0, err
    assert json.loads(out)["modes"] == ["off", "ngram"]
    assert "overall" in err


@pytest.mark.parametrize(("args", "message"), [
    (["bench", "/nonexistent/q.jsonl"], "no such file"),
    (["bench", "--categories", "poetry"], "unknown category poetry; this file has: code-edit"),
    (["bench", "--modes", "auto,turbo"], "unknown mode turbo"),
    (["bench", "--limit", "0"], "--limit must be >= 1"),
    (["bench", "--json", "/nonexistent/dir/out.json"], "does not exist"),
])
def test_cli_bad_input_exits_2_before_loading(opened: dict, args: list[str], message: str,
                                              capsys: Any) -> None:
    code, out, err = run(args, capsys)
    assert code == 2 and out == ""
    assert message in err
    assert "settings" not in opened  # failed before any model was loaded


def test_cli_bad_line_number(opened: dict, tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n\n{oops\n", encoding="utf-8")
    code, _, err = run(["bench", str(path)], capsys)
    assert code == 2 and f"{path}:3: invalid JSON" in err


def test_cli_explicit_draft_mode_without_draft_model(opened: dict, capsys: Any) -> None:
    code, _, err = run(["bench", "--modes", "draft", "--limit", "1"], capsys)
    assert code == 2 and "--modes draft needs a draft model" in err


def test_cli_default_modes_drop_draft_when_none_is_loaded(opened: dict, tmp_path: Path,
                                                           capsys: Any) -> None:
    path = write_jsonl(tmp_path / "q.jsonl", LINES[:1])
    code, _, err = run(["bench", str(path), "-n", "4", "--no-warmup"], capsys)
    assert code == 0, err
    assert "mode draft is left out" in err
    assert opened["settings"].spec == "draft"  # asked open_runtime for the default draft


def test_cli_calibrate_measures_and_prints_the_cost_table(
        opened: dict, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "models"))
    opened["draft"] = fake_model(seed=4)
    code, out, err = run(["bench", "--calibrate"], capsys)
    assert code == 0, err
    assert "verify batch" in out and "ceiling" in out and "draft needs" in out
    assert len([line for line in out.splitlines() if line.strip()[:2].strip().isdigit()]) >= 17
    saved = json.loads((tmp_path / "calibration.json").read_text())
    tables = [v for v in saved.values() if "seconds" in v]
    assert len(tables) == 2  # target and draft, cached for later starts
    assert any(k.startswith("acceptance-") for k in saved)  # what auto learnt, kept too


def test_peer_script_compares_each_program_with_its_own_baseline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "peers", Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py")
    assert spec is not None and spec.loader is not None
    peers = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "peers", peers)  # dataclasses look their module up
    spec.loader.exec_module(peers)  # imports no llama_cpp until a peer is loaded

    def row(config: str, base: str, tokens: int, seconds: float) -> dict[str, Any]:
        return {"question_id": "1", "category": "qa", "config": config, "baseline": base,
                "decode_tokens": tokens, "decode_seconds": seconds, "matches_baseline": True}

    rows = [row("lcp k=2", "lcp plain", 30, 2.0), row("lcp plain", "lcp plain", 30, 1.0),
            row("specchat off", "specchat off", 30, 1.5),
            row("specchat ngram", "specchat off", 30, 1.0)]
    names = ["lcp plain", "lcp k=2", "specchat off", "specchat ngram"]
    sums = peers.summarize(rows, names)
    assert list(sums["qa"]) == names  # fixed order, whatever order the runs came in
    assert sums["overall"]["lcp k=2"]["speedup"] == pytest.approx(0.5)
    assert sums["overall"]["specchat ngram"]["speedup"] == pytest.approx(1.5)


def test_cli_stays_greedy_whatever_the_chat_environment_says(
        opened: dict, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_TEMPERATURE", "0.7")
    path = write_jsonl(tmp_path / "q.jsonl", LINES[:1])
    code, out, err = run(["bench", str(path), "--modes", "ngram", "-n", "4", "--json", "-"],
                         capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["settings"]["temperature"] == 0.0
    assert "other_ms_per_step" in doc["summary"][OVERALL]["ngram"]


def test_ctrl_c_keeps_only_prompts_complete_in_every_mode() -> None:
    calls: list[tuple[str, int]] = []
    runtime = scripted(fake_runtime(), calls)
    inner = runtime.stream

    def stream(prompt: Sequence[int], options: GenerationOptions) -> Iterator[Event]:
        if len(calls) == 3:  # the second prompt's second mode
            raise KeyboardInterrupt
        return inner(prompt, options)

    runtime.stream = stream  # type: ignore[method-assign]
    result = run_bench(runtime, small_prompts(3), ["off", "ngram"],
                       GenerationOptions(max_tokens=20, spec="off"), warmup=False)
    assert result.interrupted
    assert [(r.question_id, r.mode) for r in result.records] == [("0", "off"), ("0", "ngram")]
