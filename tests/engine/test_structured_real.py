"""Constrained decoding on real GGUF logits and llguidance's real grammars: at temperature 0
every mode gives plain constrained decoding's answer (token for token, or a divergence at a
batched-vs-single float near-tie, as for free text: docs/exactness.md), and the answers are
JSON that validates. 20 prompts, under three schemas and plain JSON objects in turn.
SmolLM2-135M with its Q2_K requantization as draft; the Qwen pair (0.5B drafting for 1.5B,
and prompt lookup) in the slow test."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pytest

from specchat.backend.structured import with_format_note
from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Structure
from specchat.llm import ChatTemplate, chat_tokens
from tests.support.realengine import PROMPTS, assert_near_tie, first_divergence

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (see backends/)")
grammar = pytest.importorskip("specchat.llm.grammar")
backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")
LlamaModel = backend.LlamaModel
pytestmark = pytest.mark.real

SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 80}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3,
                                                "items": {"type": "string", "maxLength": 30}},
                                      "done": {"type": "boolean"}},
     "required": ["items", "done"], "additionalProperties": False},
    {"type": "object", "properties": {"topic": {"enum": ["math", "language", "code", "other"]},
                                      "score": {"type": "integer", "minimum": 0,
                                                "maximum": 10}},
     "required": ["topic", "score"], "additionalProperties": False},
]


def structure(i: int) -> Structure:
    """Prompt i's structure: the schemas in turn, and every fourth prompt any JSON object."""
    kind = i % (len(SCHEMAS) + 1)
    return Structure("json") if kind == len(SCHEMAS) else Structure(
        "json_schema", json.dumps(SCHEMAS[kind]))


def validate(text: str, i: int) -> None:
    value = json.loads(text)
    kind = i % (len(SCHEMAS) + 1)
    if kind == len(SCHEMAS):
        assert isinstance(value, dict)
    else:
        jsonschema.validate(value, SCHEMAS[kind])


def constrained(model: LlamaModel, grammars: object, text: str, i: int, spec: str,
                n: int, draft: LlamaModel | None = None) -> Finished:
    st = structure(i)
    messages = with_format_note([{"role": "user", "content": text}], st)
    prompt = chat_tokens(model, ChatTemplate.from_model(model), messages)
    matcher = grammars.structure(st)  # type: ignore[attr-defined]
    options = GenerationOptions(max_tokens=n, spec=spec, draft_max=4)
    *_, fin = generate(model, prompt, options, draft=draft, hooks=Hooks(constraint=matcher))
    assert isinstance(fin, Finished)
    assert matcher.complete() == (fin.reason == "eog")  # a whole answer ends the grammar
    return fin


def check_modes(target: LlamaModel, draft: LlamaModel | None, modes: list[str],
                n: int) -> dict[str, int]:
    """Every prompt in every mode against `off`; a divergence must be at a near-tie."""
    grammars = grammar.Grammars(target)
    differ = dict.fromkeys(modes, 0)
    valid = 0
    for i, text in enumerate(PROMPTS):
        off = constrained(target, grammars, text, i, "off", n)
        if off.reason == "eog":
            validate(off.text, i)
            valid += 1
        for mode in modes:
            got = constrained(target, grammars, text, i, mode, n, draft)
            at = first_divergence(off.tokens, got.tokens)
            if at is None:
                continue
            differ[mode] += 1
            # Both tokens were the best allowed one, each in its own float arithmetic.
            prompt = chat_tokens(target, ChatTemplate.from_model(target), with_format_note(
                [{"role": "user", "content": text}], structure(i)))
            assert_near_tie(target, [*prompt, *off.tokens[:at]], off.tokens[at],
                            got.tokens[at], f"{mode}: prompt {i} diverged at token {at}")
    print(f"constrained greedy divergences over {len(PROMPTS)} prompts: {differ}; "
          f"{valid} whole answers, all valid")
    assert valid >= len(PROMPTS) // 2
    return differ


@pytest.fixture(scope="module")
def smol(real_model_path: Callable[[str], Path]) -> Iterator[LlamaModel]:
    with backend.load_model(real_model_path("smollm2-135m"), n_ctx=1024) as model:
        yield model


@pytest.fixture(scope="module")
def smol_q2(real_model_path: Callable[[str], Path],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaModel]:
    path = files.requantize(real_model_path("smollm2-135m"),
                            tmp_path_factory.mktemp("q2") / "smol-q2_k.gguf", "Q2_K")
    with backend.load_model(path, n_ctx=1024) as model:
        yield model


def test_constrained_greedy_equals_plain_constrained_decoding_on_smollm2(
        smol: LlamaModel, smol_q2: LlamaModel) -> None:
    differ = check_modes(smol, smol_q2, ["auto", "draft"], 48)
    assert sum(differ.values()) <= len(PROMPTS) // 4


@pytest.mark.slow
def test_constrained_greedy_equals_plain_constrained_decoding_on_the_qwen_pair(
        real_model_path: Callable[[str], Path]) -> None:
    with backend.load_model(real_model_path("qwen2.5-coder-1.5b"), n_ctx=1024) as target, \
            backend.load_model(real_model_path("qwen2.5-coder-0.5b"), n_ctx=1024) as draft:
        differ = check_modes(target, draft, ["auto", "draft", "ngram"], 40)
    # Every divergence was checked as a near-tie above; how many there are depends on the
    # CPU's kernels (an AVX2-only EPYC: draft 4, ngram 2, auto 0 of 20 at the landed main),
    # so each mode is held to a quarter of the prompts rather than all three together.
    assert max(differ.values()) <= len(PROMPTS) // 4


def test_an_end_token_after_the_grammar_stopped_is_given_back_alone(
        smol: LlamaModel) -> None:
    """llguidance does not count an end token taken in once its grammar stopped (the last
    byte was written); a rollback over it must not give back the token before it too."""
    matcher = grammar.Grammars(smol).structure(Structure("json"))
    body = smol.tokenize('{"a": 1}', add_special=False, parse_special=False)
    eos = smol.eos_token
    matcher.advance(body)
    assert matcher.complete()
    matcher.advance([eos])
    matcher.rollback(1)
    assert matcher.complete() and matcher.allowed()[eos]  # still right after "}"
    matcher.rollback(1)
    assert matcher.allows(body[-1:]) == 1 and not matcher.complete()
