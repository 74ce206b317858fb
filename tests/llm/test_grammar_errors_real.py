"""What a request that no grammar can meet gets, on a real GGUF vocabulary and llguidance's
real compiler: one short line saying what is wrong, never llguidance's parser state or the
grammar text; a logit_bias that bans every token the grammar allows ends the answer with
NoTokenLeft (the server's 400), not a token the grammar refuses."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.options import GenerationOptions, SamplingOptions, Structure
from specchat.engine.sampling import NoTokenLeft
from specchat.llm.lark import GrammarError

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (see backends/)")
grammar = pytest.importorskip("specchat.llm.grammar")
backend = pytest.importorskip("specchat.llm.model")
pytestmark = pytest.mark.real

INTERNALS = ("%json", "x-guidance", "<state>", "<grammar>", "Parser:", "lexer_cost", " | ")


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Iterator[Any]:
    with backend.load_model(real_model_path("smollm2-135m"), n_ctx=256, n_threads=1) as model:
        yield model


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 2}},
     "required": ["a"]},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
])
def test_an_unsatisfiable_schema_is_one_line_without_internals(smol: Any,
                                                                schema: dict[str, Any]) -> None:
    with pytest.raises(GrammarError) as error:
        grammar.Grammars(smol).structure(Structure("json_schema", json.dumps(schema)))
    message = str(error.value)
    assert "nsatisfiable" in message and "\n" not in message and len(message) <= 200
    assert not [bit for bit in INTERNALS if bit in message], message


def test_a_logit_bias_banning_every_token_under_json_ends_in_one_line(smol: Any) -> None:
    banned = tuple((token, float("-inf")) for token in range(smol.n_vocab))
    options = GenerationOptions(max_tokens=4, spec="off",
                                sampling=SamplingOptions(logit_bias=banned))
    prompt = smol.tokenize("Give me JSON:", add_special=False, parse_special=False)
    matcher = grammar.Grammars(smol).structure(Structure("json"))
    with pytest.raises(NoTokenLeft, match="ban fewer") as error:
        list(generate(smol, prompt, options, hooks=Hooks(constraint=matcher)))
    assert "\n" not in str(error.value)
