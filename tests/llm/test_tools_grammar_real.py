"""Tool-call grammars compiled by llguidance on real vocabularies: parameters with local
$refs (Pydantic's $defs for nested models and Enums, draft-07 `definitions`, recursion), a
response_format beside the tools, and several calls or one. Qwen2.5-Coder 0.5B has
<tool_call> as a special token and renders tools itself; SmolLM2-135M has neither (the
markers are text). Each case asks the real constraint how much of a text it allows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.backend.structured import ModelGuides, with_format_note
from specchat.engine.build import Hooks, generate
from specchat.engine.constraint import Constraint
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Structure
from specchat.errors import UsageError
from specchat.llm.template import ChatTemplate
from specchat.llm.tools import CLOSE, OPEN, Tool, ToolSet, accepts, split_calls
from tests.support.realengine import assert_near_tie, first_divergence

backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")
pytestmark = pytest.mark.real

# What Pydantic writes for `class Team(BaseModel): people: list[Person]` with a nested model
# and an Enum: every one a $ref into $defs.
TEAM = {
    "$defs": {
        "Role": {"enum": ["dev", "ops"], "title": "Role", "type": "string"},
        "Person": {"properties": {"name": {"title": "Name", "type": "string"},
                                  "role": {"$ref": "#/$defs/Role"}},
                   "required": ["name", "role"], "title": "Person", "type": "object"}},
    "properties": {"people": {"items": {"$ref": "#/$defs/Person"}, "title": "People",
                              "type": "array"}},
    "required": ["people"], "title": "Team", "type": "object"}
# Draft-07's `definitions`, and recursion through the root and through a definition.
OLD = {"definitions": {"Unit": {"enum": ["c", "f"]}}, "type": "object",
       "properties": {"unit": {"$ref": "#/definitions/Unit"}}, "required": ["unit"]}
TREE = {"type": "object", "properties": {"label": {"type": "string"},
                                         "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["label"]}
NODE = {"$defs": {"Node": {"type": "object", "properties": {
    "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
    "required": ["v", "next"]}}, "type": "object",
    "properties": {"head": {"$ref": "#/$defs/Node"}}, "required": ["head"]}
TOOLS = (Tool("team", "", TEAM), Tool("old", "", OLD), Tool("tree", "", TREE),
         Tool("chain", "", NODE))
GOOD = {"team": {"people": [{"name": "Ada", "role": "dev"}, {"name": "Bo", "role": "ops"}]},
        "old": {"unit": "c"},
        "tree": {"label": "a", "kids": [{"label": "b", "kids": [{"label": "c"}]}]},
        "chain": {"head": {"v": 1, "next": {"v": 2, "next": None}}}}
BAD = {"team": {"people": [{"name": "Ada", "role": "boss"}]},
       "old": {"unit": "k"},
       "tree": {"label": "a", "kids": [{"kids": []}]},
       "chain": {"head": {"v": 1, "next": {"v": "two", "next": None}}}}


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "smollm2-135m"])
def guides(request: pytest.FixtureRequest,
           real_model_path: Callable[[str], Path]) -> Iterator[ModelGuides]:
    with backend.load_model(real_model_path(request.param), n_ctx=256) as model:
        yield ModelGuides(model, ChatTemplate.from_model(model))


def call(name: str, arguments: Any) -> str:
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments})}\n{CLOSE}"


def allows(guides: ModelGuides, constraint: Constraint | None, text: str) -> bool:
    """Whether the constraint takes the whole text and may end there."""
    assert constraint is not None
    tokens = guides.model.tokenize(text, add_special=False, parse_special=True)
    if constraint.allows(tokens) != len(tokens):
        return False
    constraint.advance(tokens)
    return constraint.complete()


@pytest.mark.parametrize("name", [t.name for t in TOOLS])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_parameters_with_local_refs_compile_and_hold(guides: ModelGuides, name: str,
                                                     choice: str) -> None:
    tools = ToolSet(TOOLS, name if choice == "named" else choice)
    assert allows(guides, guides.constraint(None, tools), call(name, GOOD[name]))
    assert not allows(guides, guides.constraint(None, tools), call(name, BAD[name]))
    # What the server checks a call against again resolves the same pointers.
    accept = accepts(TOOLS)
    _, calls = split_calls(call(name, GOOD[name]), accept)
    assert [c.name for c in calls] == [name]
    assert split_calls(call(name, BAD[name]), accept)[1] == []


@pytest.mark.parametrize("structure", [Structure("json_schema", json.dumps(TEAM)),
                                       Structure("json")])
def test_response_format_beside_tools_allows_a_call_or_the_format(
        guides: ModelGuides, structure: Structure) -> None:
    tools = ToolSet(TOOLS, "auto")
    answer = json.dumps(GOOD["team"])
    assert allows(guides, guides.constraint(structure, tools), answer)
    assert allows(guides, guides.constraint(structure, tools), call("tree", GOOD["tree"]))
    assert not allows(guides, guides.constraint(structure, tools), "Sure, here it is.")
    assert not allows(guides, guides.constraint(structure, tools),
                      "Let me see. " + call("tree", GOOD["tree"]))
    if structure.kind == "json_schema":
        assert not allows(guides, guides.constraint(structure, tools), json.dumps(BAD["team"]))
    # A call forced by tool_choice is the answer, whatever the format says.
    forced = ToolSet(TOOLS, "required")
    assert not allows(guides, guides.constraint(structure, forced), answer)
    with pytest.raises(UsageError) as refused:
        guides.constraint(Structure("grammar", 'start: "x"'), tools)
    assert refused.value.param == "grammar"


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_several_calls_unless_parallel_tool_calls_is_false(guides: ModelGuides,
                                                           choice: str) -> None:
    two = call("old", GOOD["old"]) + "\n" + call("tree", GOOD["tree"])
    assert allows(guides, guides.constraint(None, ToolSet(TOOLS, choice)), two)
    one = ToolSet(TOOLS, choice, parallel=False)
    assert not allows(guides, guides.constraint(None, one), two)
    assert allows(guides, guides.constraint(None, one), call("old", GOOD["old"]))


ASKS = ["Report on a team of two people, Ada (dev) and Bo (ops).",
        "Make a linked list 1, 2, 3."]


def answer(guides: ModelGuides, text: str, spec: str, draft: Any = None) -> Finished:
    structure = Structure("json_schema", json.dumps(TEAM))
    tools = ToolSet(TOOLS, "auto")
    messages = with_format_note([{"role": "user", "content": text}], structure, True)
    prompt = guides.prompt(messages, tools)
    constraint = guides.constraint(structure, tools)
    options = GenerationOptions(max_tokens=32, spec=spec, draft_max=4)
    *_, fin = generate(guides.model, prompt, options, draft=draft,
                       hooks=Hooks(constraint=constraint))
    assert isinstance(fin, Finished)
    return fin


@pytest.mark.slow
def test_speculation_under_tools_beside_a_format_is_plain_decodings_answer(
        real_model_path: Callable[[str], Path],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """At temperature 0, drafting (a Q2_K requantization) and prompt lookup under the
    joined grammar give plain constrained decoding's answer, or leave it at a near-tie."""
    smol = real_model_path("smollm2-135m")
    q2 = files.requantize(smol, tmp_path_factory.mktemp("q2") / "smol-q2_k.gguf", "Q2_K")
    with backend.load_model(smol, n_ctx=1024) as target, \
            backend.load_model(q2, n_ctx=1024) as draft:
        guides = ModelGuides(target, ChatTemplate.from_model(target))
        for text in ASKS:
            off = answer(guides, text, "off")
            for spec, drafter in (("draft", draft), ("ngram", None)):
                got = answer(guides, text, spec, drafter)
                at = first_divergence(off.tokens, got.tokens)
                if at is not None:
                    prompt = guides.prompt(with_format_note(
                        [{"role": "user", "content": text}],
                        Structure("json_schema", json.dumps(TEAM)), True), ToolSet(TOOLS))
                    assert_near_tie(target, [*prompt, *off.tokens[:at]], off.tokens[at],
                                    got.tokens[at], f"{spec}: {text!r} at token {at}")
