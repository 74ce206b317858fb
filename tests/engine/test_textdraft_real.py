"""Drafting across real vocabularies: SmolLM2-135M (BPE, 49152 ids) and Gemma-3-270M
(SentencePiece, 262144 ids), each drafting for the other through text.

Greedy answers must equal plain decoding's, up to float near-ties (the check of
test_engine_real.py: where they part, the two tokens' logits are no further apart than
batched and single-token arithmetic differ); the acceptance is measured and printed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions
from specchat.engine.textdraft import TextVocabs
from specchat.llm import compatibility_problems, load_model
from specchat.llm.model import LlamaModel
from specchat.llm.textvocab import LlamaTextVocab
from tests.support.clirun import FakeStdin, run_cli
from tests.support.realengine import PROMPTS, assert_near_tie, first_divergence, prompt_of

pytestmark = pytest.mark.real

N_PROMPTS = 4
N_TOKENS = 32


@pytest.fixture(scope="module")
def models(real_model_path: Callable[[str], Path]) -> Iterator[dict[str, LlamaModel]]:
    with load_model(real_model_path("smollm2-135m"), n_ctx=1024) as smol, \
            load_model(real_model_path("gemma3-270m"), n_ctx=1024) as gemma:
        yield {"smollm2": smol, "gemma3": gemma}


def answer(target: LlamaModel, prompt: list[int], spec: str,
           draft: LlamaModel | None = None) -> Finished:
    vocabs = None if draft is None else TextVocabs(LlamaTextVocab(target),
                                                   LlamaTextVocab(draft))
    options = GenerationOptions(max_tokens=N_TOKENS, spec=spec, draft_max=6)
    last = list(generate(target, prompt, options, draft=draft, hooks=Hooks(vocabs=vocabs)))[-1]
    assert isinstance(last, Finished)
    return last


@pytest.mark.parametrize("target_name,draft_name", [("gemma3", "smollm2"),
                                                     ("smollm2", "gemma3")])
def test_greedy_answers_equal_plain_decoding_across_vocabularies(
        models: dict[str, LlamaModel], target_name: str, draft_name: str) -> None:
    target, draft = models[target_name], models[draft_name]
    assert compatibility_problems(target.vocab_info(), draft.vocab_info())  # really differ
    differ = drafted = accepted = steps = generated = 0
    for text in PROMPTS[:N_PROMPTS]:
        prompt = prompt_of(target, text)
        off = answer(target, prompt, "off")
        spec = answer(target, prompt, "draft", draft)
        drafted += spec.stats.drafted
        accepted += spec.stats.accepted
        steps += spec.stats.steps
        generated += spec.stats.generated
        i = first_divergence(off.tokens, spec.tokens)
        if i is not None:
            differ += 1
            assert_near_tie(target, [*prompt, *off.tokens[:i]], off.tokens[i], spec.tokens[i],
                            f"{draft_name} for {target_name}: diverged at token {i}")
    print(f"{draft_name} drafting for {target_name}: acceptance {accepted}/{drafted}, "
          f"{generated / steps:.2f} tokens per step, {differ} near-tie divergences")
    assert differ <= N_PROMPTS // 2  # each one checked a near tie above
    assert drafted > 0 and accepted > drafted / 5  # the text is often the target's own


def test_ask_json_and_doctor_say_the_draft_drafts_text(
        real_model_path: Callable[[str], Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    gemma, smol = str(real_model_path("gemma3-270m")), str(real_model_path("smollm2-135m"))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    args = ["ask", "Say hi", "-n", "4", "-t", "0", "--spec", "draft", "--json"]
    code, out, err = run_cli([*args, "-m", gemma, "-d", smol], capsys)
    assert code == 0, err
    assert json.loads(out)["draft_drafts_text"] is True
    code, out, err = run_cli([*args, "-m", smol, "-d", smol], capsys)
    assert code == 0, err
    assert json.loads(out)["draft_drafts_text"] is False

    monkeypatch.setenv("SPECCHAT_MODEL", gemma)
    monkeypatch.setenv("SPECCHAT_DRAFT", smol)
    line = json.loads(run_cli(["doctor", "--json"], capsys)[1])["draft model"]
    assert "another vocabulary than the target's: it drafts text" in line
    monkeypatch.setenv("SPECCHAT_MODEL", smol)
    line = json.loads(run_cli(["doctor", "--json"], capsys)[1])["draft model"]
    assert "drafts text" not in line
