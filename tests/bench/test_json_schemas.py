"""`specchat bench --json-schemas`: the built-in set of schema prompts, constrained answers in
every mode, and the report of how many answers match their schema. Fake models and grammars."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from specchat.backend.base import RuntimeInfo
from specchat.backend.local import Runtime
from specchat.bench import prompts as bp
from specchat.bench.report import OVERALL, render, summarize, to_json
from specchat.bench.runner import run_bench
from specchat.engine.options import GenerationOptions
from specchat.errors import UsageError
from tests.support.clirun import run_cli
from tests.support.fakegrammar import JSON_EOS, JSON_PIECES, JsonGuides
from tests.support.fakes import FakeModel


def test_the_built_in_json_set_is_valid() -> None:
    prompts = bp.load_prompts(None, bp.JSON_NAME)
    assert len(prompts) >= 10 and len(bp.categories_of(prompts)) >= 3
    for prompt in prompts:
        assert prompt.schema is not None and prompt.structure() is not None
        jsonschema.validators.validator_for(json.loads(prompt.schema)).check_schema(
            json.loads(prompt.schema))


def test_schema_prompts_are_constrained_in_every_mode_and_checked(tmp_path: Path) -> None:
    person = {"type": "object", "required": ["name", "age"]}
    adult = {"type": "object", "properties": {"age": {"minimum": 18}}}
    lines = [{"question_id": "p", "category": "json", "turns": ["who?"], "schema": person},
             {"question_id": "a", "category": "json", "turns": ["adult?"], "schema": adult},
             {"question_id": "t", "category": "text", "turns": ["free"]}]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    guides = JsonGuides()
    model = FakeModel(len(JSON_PIECES), seed=1, eog=(JSON_EOS,), pieces=JSON_PIECES)
    runtime = Runtime(target=model, draft=None, chat_tokens=lambda m: [0, 1],
                      raw_tokens=lambda t: [0], info=RuntimeInfo(target_name="fake"),
                      guides=guides)
    result = run_bench(runtime, bp.load_prompts(path), ["off", "ngram"],
                       GenerationOptions(max_tokens=20), warmup=False)
    valid = {(r.question_id, r.mode): r.valid for r in result.records}
    assert valid == {("p", "off"): True, ("p", "ngram"): True, ("a", "off"): False,
                     ("a", "ngram"): False, ("t", "off"): None, ("t", "ngram"): None}
    assert all(r.matched_off for r in result.records if r.mode == "ngram")
    assert [s.kind for s in guides.asked if s is not None] == ["json_schema"] * 4
    summary = summarize(result.records, ["off", "ngram"])
    assert (summary[OVERALL]["ngram"].checked, summary[OVERALL]["ngram"].valid) == (2, 1)
    console = Console(record=True, width=100)
    render(console, summary, greedy=True)
    assert "answers that are JSON matching their schema: off 1/2, ngram 1/2" in \
        console.export_text()
    doc = to_json(result, ["off", "ngram"], {})
    assert doc["summary"][OVERALL]["ngram"]["schema_valid"] == 1


def test_json_schemas_takes_no_file(tmp_path: Path, capsys: Any) -> None:
    code, _, err = run_cli(["bench", "--json-schemas", str(tmp_path / "x.jsonl")], capsys)
    assert code == 2 and "--json-schemas runs the built-in JSON set" in err


def test_a_bad_schema_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question_id": 1, "category": "c", "turns": ["x"],
                                "schema": 3}) + "\n")
    with pytest.raises(UsageError, match=r"bad.jsonl:1: schema must be a JSON schema"):
        bp.load_prompts(path)
