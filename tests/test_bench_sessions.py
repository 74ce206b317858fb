"""`specchat bench --sessions`: the session files, the summary, and real runs through
`specchat ask` processes and `specchat serve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specchat.bench.session_report import OVERALL, summarize
from specchat.bench.session_runner import Outcome
from specchat.bench.sessions import load_sessions, parse_sessions
from specchat.errors import UsageError
from tests.clirun import run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_the_built_in_set_has_related_requests_of_several_kinds() -> None:
    sessions = load_sessions(None)
    assert len(sessions) >= 5 and all(len(s.requests) >= 4 for s in sessions)
    assert {"conversions", "tool-calls", "sql", "docstrings", "tests"} <= \
        {s.category for s in sessions}
    tools = next(s for s in sessions if s.category == "tool-calls")
    assert tools.system and tools.messages("x")[0]["role"] == "system"


def test_sessions_come_whole_or_request_by_request() -> None:
    text = "\n".join(json.dumps(r) for r in [
        {"session": "a", "category": "c", "requests": ["1", "2"]},
        {"session": "b", "prompt": "x"},
        {"session": "a", "turns": ["3", "ignored"]},
        {"session": "b", "prompt": "y", "system": "s"},
    ])
    a, b = parse_sessions(text, "f")
    assert (a.name, a.category, a.requests) == ("a", "c", ["1", "2", "3"])
    assert (b.category, b.requests, b.system) == ("b", ["x", "y"], None)


@pytest.mark.parametrize("line, says", [
    ("[1]", "JSON object"), ('{"requests": ["a"]}', "Spec-Bench"),
    ('{"session": "a"}', "requests"), ('{"session": "a", "requests": []}', "non-empty"),
    ('{"session": "a", "requests": ["x"], "system": 3}', "system"), ("{oops", "invalid JSON"),
])
def test_a_bad_line_is_one_usage_error_naming_it(line: str, says: str) -> None:
    with pytest.raises(UsageError, match=f"f:1: .*{says}"):
        parse_sessions(line, "f")


def out(session: str, index: int, mode: str, tokens: int, seconds: float,
        answer: list[int], sources: dict[str, dict[str, int]] | None = None) -> Outcome:
    return Outcome(session, index, mode, tokens, seconds, tokens // 2, "", answer,
                   sources or {})


def test_the_summary_skips_first_requests_and_sums_before_dividing() -> None:
    runs = [
        out("s", 0, "off", 100, 1.0, [1]), out("s", 0, "auto", 100, 0.1, [1]),
        out("s", 1, "off", 100, 2.0, [1, 2]),
        out("s", 1, "auto", 100, 1.0, [1, 2], {"history": {"drafted": 10, "accepted": 8}}),
        out("s", 2, "off", 50, 2.0, [3]), out("s", 2, "auto", 50, 2.0, [4]),
        out("t", 1, "off", 10, 1.0, [5]), out("t", 1, "auto", 10, 0.5, [5]),
    ]
    rows = {r.session: r for r in summarize(runs, ["off", "auto"])}
    assert list(rows)[-1] == OVERALL
    s = rows["s"]
    assert s.cells["auto"].requests == 2  # the first request only filled the store
    assert s.ratio("auto") == pytest.approx((150 / 3.0) / (150 / 4.0))
    assert s.cells["auto"].sources == {"history": [10, 8]}
    assert (s.same, s.compared) == (1, 2)
    assert rows[OVERALL].ratio("auto") == pytest.approx((160 / 3.5) / (160 / 5.0))


def test_bad_flags_fail_before_anything_runs(capsys: Any) -> None:
    code, _, err = run_cli(["bench", "--sessions", "--via", "carrier-pigeon"], capsys)
    assert code == 2 and "--via" in err
    code, _, err = run_cli(["bench", "--sessions", "--limit", "1"], capsys)
    assert code == 2 and "at least 2" in err
    code, _, err = run_cli(["bench", "--sessions", "--categories", "poetry"], capsys)
    assert code == 2 and "poetry" in err


SESSION = {"session": "fns", "category": "code", "requests": [
    "Write a Python function add(a, b) that returns a + b.",
    "Write a Python function sub(a, b) that returns a - b."]}


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("via", ["ask", "serve"])
def test_real_sessions_run_through_processes_or_a_server(
        via: str, tmp_path: Path, real_model_path: Any) -> None:
    real_model_path("smollm2-135m")
    sessions = tmp_path / "s.jsonl"
    sessions.write_text(json.dumps(SESSION) + "\n")
    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "specchat", "bench", "--sessions", str(sessions), "-m",
         "smollm2-135m", "-n", "12", "--via", via, "--json", str(report), "--no-llama-cpp"],
        env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert {(r["index"], r["mode"]) for r in data["runs"]} == \
        {(i, m) for i in (0, 1) for m in ("off", "auto")}
    overall = next(s for s in data["sessions"] if s["session"] == OVERALL)
    assert overall["compared"] == 1 and overall["greedy_equal"] == 1
    assert overall["modes"]["auto"]["tokens"] > 0
    assert "overall" in proc.stdout  # the table (notes and progress go to stderr)
