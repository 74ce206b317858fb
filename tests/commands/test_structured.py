"""`specchat ask --format json` and `--schema` on a fake model whose grammar writes one JSON
object: the answer is checked against the schema, an answer cut short is exit 1 with one
line, bad schemas are usage errors, and the options come from the config file and profiles
too. /set format json in the chat."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.backend.base import RuntimeInfo
from specchat.backend.local import Runtime
from specchat.commands import ask as ask_cmd
from specchat.engine.options import Structure
from specchat.errors import UsageError
from tests.support.clirun import FakeStdin, run_cli
from tests.support.fakegrammar import JSON_EOS, JSON_PIECES, JsonGuides
from tests.support.fakes import FakeModel

ANSWER = b"".join(JSON_PIECES[:-1]).decode()
PERSON = {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.fixture
def guides(monkeypatch: pytest.MonkeyPatch) -> Iterator[JsonGuides]:
    made = JsonGuides()
    seen: list[list[dict[str, Any]]] = []

    def open_fake(settings: Any) -> Runtime:
        model = FakeModel(len(JSON_PIECES), seed=1, eog=(JSON_EOS,), pieces=JSON_PIECES)

        def chat_tokens(messages: Any) -> list[int]:
            seen.append(list(messages))
            return [0, 1]

        return Runtime(target=model, draft=None, chat_tokens=chat_tokens,
                       raw_tokens=lambda text: [0], info=RuntimeInfo(target_name="fake"),
                       guides=made)

    monkeypatch.setattr(ask_cmd, "open_runtime", open_fake)
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    made.seen = seen  # type: ignore[attr-defined]
    yield made


def test_schema_answer_is_printed_and_valid(guides: JsonGuides, capsys: Any,
                                            tmp_path: Path) -> None:
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON))
    for schema in (str(path), json.dumps(PERSON)):
        code, out, err = run_cli(["ask", "--schema", schema, "-n", "20", "who?"], capsys)
        assert (code, out, err) == (0, ANSWER + "\n", "")
        assert guides.asked[-1] == Structure("json_schema", json.dumps(PERSON), strict=False)
    # The model was told the schema, after the question, as plain text.
    last = guides.seen[-1][-1]  # type: ignore[attr-defined]
    assert last["role"] == "user" and last["content"].startswith("who?\n\n")
    assert json.dumps(PERSON, separators=(",", ":")) in last["content"]


def test_format_json(guides: JsonGuides, capsys: Any) -> None:
    code, out, _ = run_cli(["ask", "--format", "json", "-n", "20", "who?"], capsys)
    assert code == 0 and json.loads(out) == {"name": "Ann", "age": 7}
    assert guides.asked[-1] == Structure("json")


def test_an_answer_cut_short_is_exit_1_with_one_line(guides: JsonGuides, capsys: Any) -> None:
    code, out, err = run_cli(["ask", "--format", "json", "-n", "3", "who?"], capsys)
    assert code == 1 and out == '{"name": "Ann", "age": \n'
    assert err.count("\n") == 1 and "ran out of tokens" in err and "--max-tokens" in err


def test_an_answer_that_breaks_a_schema_keyword_is_exit_1(guides: JsonGuides,
                                                          capsys: Any) -> None:
    schema = {**PERSON, "properties": {"name": {"type": "string"},
                                       "age": {"type": "integer", "minimum": 18}}}
    code, _, err = run_cli(["ask", "--schema", json.dumps(schema), "-n", "20", "x"], capsys)
    assert code == 1 and err.count("\n") == 1
    assert "does not match the schema at age: 7 is less than the minimum of 18" in err


@pytest.mark.parametrize("schema, words", [
    ("/no/such/schema.json", "cannot read it"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "cannot read it"),
])
def test_bad_schemas_are_usage_errors(guides: JsonGuides, capsys: Any, schema: str,
                                      words: str) -> None:
    code, out, err = run_cli(["ask", "--schema", schema, "x"], capsys)
    assert code == 2 and out == "" and words in err and err.count("\n") == 1


def test_format_and_schema_from_the_config_file_and_a_profile(
        guides: JsonGuides, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.toml").write_text(
        f"format = \"json\"\n[profile.person]\nschema = '{json.dumps(PERSON)}'\n")
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    assert run_cli(["ask", "-n", "20", "x"], capsys)[0] == 0
    assert guides.asked[-1] == Structure("json")
    assert run_cli(["ask", "--profile", "person", "-n", "20", "x"], capsys)[0] == 0
    assert guides.asked[-1] is not None and guides.asked[-1].kind == "json_schema"


def test_spec_and_draft_are_refused_with_an_endpoint(capsys: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    for flag in (["--spec", "ngram"], ["--draft", "x.gguf"]):
        code, _, err = run_cli(["ask", "--endpoint", "http://127.0.0.1:9", *flag, "hi"], capsys)
        assert code == 2 and "has no effect with --endpoint" in err


def test_set_format_and_schema_in_the_chat(tmp_path: Path) -> None:
    from specchat.chat import commands
    from tests.support import chat_fakes as f

    chat, streams = f.session(tmp_path)
    commands.dispatch(chat, "/set format json")
    assert chat.options.structure == Structure("json")
    commands.dispatch(chat, f"/set schema {json.dumps(PERSON)}")
    assert chat.options.structure == Structure("json_schema", json.dumps(PERSON), strict=False)
    commands.dispatch(chat, "/show")
    commands.dispatch(chat, "/set format text")
    assert chat.options.structure is None
    _, err = streams.take()
    assert "format = json" in err and "format=json" in err and "format = text" in err


def _deep_schema(levels: int) -> str:
    return '{"not": ' * levels + "{}" + "}" * levels


@pytest.mark.parametrize("schema, words", [
    ('{"type": "string", "pattern": "("}', "pattern ( cannot be used"),
    ('{"type": "string", "pattern": "(?=a)"}', "linear-time engine"),
    ('{"not": {"$ref": "file:///etc/passwd"}}', "$ref file:///etc/passwd is refused"),
    ('{"not": {"$ref": "http://127.0.0.1:9/s.json"}}', "never to a URL"),
    ("DEEP", "nests too deeply"),
    ("DEEP-100", "deeper than 64 levels"),
])
def test_schemas_specchat_cannot_check_safely_are_refused_before_answering(
        guides: JsonGuides, capsys: Any, tmp_path: Path, schema: str, words: str) -> None:
    if schema.startswith("DEEP"):
        path = tmp_path / "deep.json"
        path.write_text(_deep_schema(100 if schema == "DEEP-100" else 100_000))
        schema = str(path)
    code, out, err = run_cli(["ask", "--schema", schema, "-n", "20", "x"], capsys)
    assert code == 2 and out == "" and words in err and err.count("\n") == 1, err
    assert guides.asked == []  # refused before any answer


def test_set_schema_in_the_chat_refuses_the_same(tmp_path: Path) -> None:
    from specchat.chat import commands
    from tests.support import chat_fakes as f

    chat, _ = f.session(tmp_path)
    with pytest.raises(UsageError, match="pattern"):
        commands.dispatch(chat, '/set schema {"type": "string", "pattern": "(a)\\\\1"}')
    with pytest.raises(UsageError, match="never to a URL"):
        commands.dispatch(chat, '/set schema {"$ref": "https://127.0.0.1:9/x"}')
    assert chat.options.structure is None
