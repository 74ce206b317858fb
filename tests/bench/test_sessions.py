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
from specchat.bench.sessions import load_sessions, parse_sessions
from specchat.errors import UsageError
from tests.support.benchruns import outcome
from tests.support.clirun import run_cli

ROOT = Path(__file__).resolve().parents[2]


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


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}


def test_a_session_shapes_its_answers_with_a_schema_or_tools() -> None:
    text = "\n".join(json.dumps(r) for r in [
        {"session": "a", "schema": SCHEMA, "prompt": "1"},
        {"session": "a", "prompt": "2"},  # an unshaped later line keeps the session's schema
        {"session": "b", "tools": TOOLS, "tool_choice": "required", "requests": ["x", "y"]},
        {"session": "b", "tools": TOOLS, "prompt": "z"},
    ])
    a, b = parse_sessions(text, "f")
    assert json.loads(a.schema or "") == SCHEMA and a.tools is None and a.requests == ["1", "2"]
    assert (b.tools, b.tool_choice, b.schema, len(b.requests)) == (TOOLS, "required", None, 3)


@pytest.mark.parametrize("lines, says", [
    ([{"session": "a", "prompt": "x", "schema": "int"}], "f:1: schema must be a JSON schema"),
    ([{"session": "a", "prompt": "x", "tools": [{"type": "retrieval"}]}], "f:1: .*function"),
    ([{"session": "a", "prompt": "x", "tools": TOOLS, "tool_choice": {
        "type": "function", "function": {"name": "nope"}}}], "f:1: .*nope"),
    ([{"session": "a", "prompt": "x", "tool_choice": "required"}], "f:1: .*no tools"),
    ([{"session": "a", "prompt": "x", "tools": TOOLS, "schema": SCHEMA}], "f:1: .*not both"),
    ([{"session": "a", "prompt": "x", "schema": SCHEMA},
      {"session": "a", "prompt": "y", "schema": {"type": "array"}}], "f:2: schema differs"),
    ([{"session": "a", "prompt": "x", "schema": SCHEMA},
      {"session": "a", "prompt": "y", "tools": TOOLS}], "f:2: .*not both"),
])
def test_a_bad_shape_is_one_usage_error_naming_its_line(lines: list[dict[str, Any]],
                                                        says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_sessions("\n".join(json.dumps(line) for line in lines), "f")


def test_the_summary_skips_first_requests_and_sums_before_dividing() -> None:
    runs = [
        outcome("s", 0, "off", 100, 1.0, [1]), outcome("s", 0, "auto", 100, 0.1, [1]),
        outcome("s", 1, "off", 100, 2.0, [1, 2]),
        outcome("s", 1, "auto", 100, 1.0, [1, 2], {"history": {"drafted": 10, "accepted": 8}}),
        outcome("s", 2, "off", 50, 2.0, [3]), outcome("s", 2, "auto", 50, 2.0, [4]),
        outcome("t", 1, "off", 10, 1.0, [5]), outcome("t", 1, "auto", 10, 0.5, [5]),
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


def test_tools_are_refused_through_ask_before_anything_runs(tmp_path: Path,
                                                            capsys: Any) -> None:
    sessions = tmp_path / "s.jsonl"
    sessions.write_text(json.dumps({"session": "w", "tools": TOOLS, "requests": ["a", "b"]}))
    code, _, err = run_cli(["bench", "--sessions", str(sessions)], capsys)
    assert code == 2 and "--via serve" in err and len(err.strip().splitlines()) == 1


SESSION = {"session": "fns", "category": "code", "requests": [
    "Write a Python function add(a, b) that returns a + b.",
    "Write a Python function sub(a, b) that returns a - b."]}
SHAPED = [{"session": "ages", "schema": SCHEMA, "requests": ["Maria is 31.", "Tom is 45."]},
          {"session": "calls", "tools": TOOLS, "tool_choice": "required",
           "requests": ["Weather in Lisbon?", "Weather in Osaka?"]}]


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("via", ["ask", "serve"])
def test_real_sessions_run_through_processes_or_a_server(
        via: str, tmp_path: Path, real_model_path: Any) -> None:
    real_model_path("smollm2-135m")
    sessions = tmp_path / "s.jsonl"
    chosen = [SESSION, *SHAPED[: 2 if via == "serve" else 1]]  # ask takes no tools
    sessions.write_text("".join(json.dumps(s) + "\n" for s in chosen))
    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "specchat", "bench", "--sessions", str(sessions), "-m",
         "smollm2-135m", "-n", "40", "--via", via, "--json", str(report), "--no-llama-cpp"],
        env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert {(r["session"], r["index"], r["mode"]) for r in data["runs"]} == \
        {(s["session"], i, m) for s in chosen for i in (0, 1) for m in ("off", "auto")}
    overall = next(s for s in data["sessions"] if s["session"] == OVERALL)
    assert overall["compared"] == len(chosen) and overall["greedy_equal"] == len(chosen)
    assert overall["modes"]["auto"]["tokens"] > 0
    assert "overall" in proc.stdout  # the table (notes and progress go to stderr)
    texts = {(r["session"], r["index"]): r["text"] for r in data["runs"] if r["mode"] == "auto"}
    for i in (0, 1):  # every answer has the session's shape
        assert isinstance(json.loads(texts["ages", i])["age"], int)
        if via == "serve":
            assert '"get_weather"' in texts["calls", i]


FAKE_ASK = """
import json, os, sys
os.makedirs(os.environ["SPECCHAT_DRAFT_STORE_DIR"], exist_ok=True)  # as a real ask's store
print(json.dumps({"text": "ok", "tokens": [1], "stats": {"generated": 1,
                  "decode_seconds": 0.1, "steps": 1}}))
"""


def test_a_session_name_never_becomes_a_path(tmp_path: Path) -> None:
    from specchat.bench.session_runner import Launch, run_sessions, store_folder
    from specchat.bench.sessions import Session

    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    outside = tmp_path / "outside"
    names = [str(outside / "x"), "../../../escape", "..", "sql shop", "sql_shop", ".hidden"]
    sessions = [Session(name, "c", None, ["q"]) for name in names]
    launch = Launch((sys.executable, "-c", FAKE_ASK), (), 4)
    outcomes = run_sessions(sessions, ["off"], launch, work).outcomes
    assert [o.session for o in outcomes] == names
    assert [p.name for p in work.iterdir()] == ["round-1"]
    made = sorted(p.name for p in (work / "round-1").iterdir())
    assert len(made) == len(names)  # one folder each, names that differ stay apart
    assert all(p.is_dir() and not p.name.startswith(".") for p in (work / "round-1").iterdir())
    assert not outside.exists() and not (tmp_path / "escape-off").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    assert store_folder("..", "off") in made and "/" not in "".join(made)


# Counts the requests its store has seen before this one (a file per request), as steps.
COUNTING_ASK = """
import json, os
store = os.environ["SPECCHAT_DRAFT_STORE_DIR"]
os.makedirs(store, exist_ok=True)
seen = len(os.listdir(store))
open(os.path.join(store, f"request-{seen}"), "w").close()
print(json.dumps({"text": "ok", "tokens": [1], "stats": {"generated": 1,
                  "decode_seconds": 0.1, "steps": seen}}))
"""


def test_every_round_runs_the_sessions_again_from_empty_stores(tmp_path: Path) -> None:
    from specchat.bench.session_runner import Launch, run_sessions
    from specchat.bench.sessions import Session

    sessions = [Session("a", "c", None, ["q1", "q2", "q3"]), Session("b", "c", None, ["q"])]
    launch = Launch((sys.executable, "-c", COUNTING_ASK), (), 4)
    outcomes = run_sessions(sessions, ["off", "auto"], launch, tmp_path, rounds=2).outcomes
    assert len(outcomes) == 2 * 4 * 2
    for o in outcomes:  # each mode's store held exactly the session's earlier requests
        assert o.steps == o.index
    assert {(o.session, o.index, o.mode, o.round) for o in outcomes} == \
        {(s.name, i, m, r) for s in sessions for i in range(len(s.requests))
         for m in ("off", "auto") for r in (0, 1)}
    # The order of modes rotates on across rounds rather than restarting.
    firsts = [o.mode for o in outcomes][::2]
    assert firsts == ["auto", "off"] * 4


def test_each_round_of_a_request_is_one_pair_of_runs() -> None:
    runs = []
    for round_, auto_seconds in ((0, 1.0), (1, 2.0)):
        for o in (outcome("s", 0, "off", 100, 1.0, [1]), outcome("s", 0, "auto", 100, 1.0, [1]),
                  outcome("s", 1, "off", 100, 2.0, [1]),
                  outcome("s", 1, "auto", 100, auto_seconds, [1 + round_])):
            o.round = round_
            runs.append(o)
    s = next(r for r in summarize(runs, ["off", "auto"]) if r.session == "s")
    assert s.cells["auto"].requests == 2 and len(s.cells["auto"].pairs) == 2
    assert s.ratio("auto") == pytest.approx((200 / 3.0) / (200 / 4.0))
    assert (s.same, s.compared) == (1, 2)  # round 2's answer differed from off's


@pytest.mark.parametrize("flags", [["--cost-profile", "cpu-2core-qwen1.5b"],
                                   ["--record", "r.json"], ["--calibrate"]])
def test_rounds_of_a_run_that_happens_once_are_refused(flags: list[str], capsys: Any) -> None:
    code, _, err = run_cli(["bench", *flags, "--rounds", "2"], capsys)
    assert code == 2 and "--rounds" in err and flags[0] in err
    assert len(err.strip().splitlines()) == 1


def test_ctrl_c_keeps_the_requests_answered_in_every_mode(tmp_path: Path) -> None:
    from specchat.bench.session_runner import Launch, Outcome, run_sessions
    from specchat.bench.sessions import Session

    heard: list[Outcome] = []

    def listener(o: Outcome) -> None:
        heard.append(o)
        if len(heard) == 5:  # the third request's first mode has answered
            raise KeyboardInterrupt

    sessions = [Session("a", "c", None, ["q1", "q2", "q3"])]
    launch = Launch((sys.executable, "-c", COUNTING_ASK), (), 4)
    run = run_sessions(sessions, ["off", "auto"], launch, tmp_path, listener=listener,
                       rounds=2)
    assert run.interrupted
    assert [(o.index, o.round) for o in run.outcomes] == [(0, 0), (0, 0), (1, 0), (1, 0)]
