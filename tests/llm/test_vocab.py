"""Vocabulary compatibility rules and messages (pure, on hand-made VocabInfo objects)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from specchat.engine.padding import MAX_VOCAB_PADDING
from specchat.errors import UsageError
from specchat.llm.vocab import VocabInfo, check_compatible, compatibility_problems
from tests.support.llmstubs import CONTROL, NORMAL, UNUSED, info


def padded(base: VocabInfo, n: int, name: str = "padded.gguf") -> VocabInfo:
    """`base` with n unused padding ids appended, as larger models of a family store them."""
    return dataclasses.replace(
        base, name=name, n_tokens=base.n_tokens + n,
        texts=(*base.texts, *(f"[PAD{base.n_tokens + i}]".encode() for i in range(n))),
        types=(*base.types, *([UNUSED] * n)))


def test_identical_vocabularies_are_compatible() -> None:
    assert compatibility_problems(info(), info("b.gguf")) == []
    check_compatible(info(), info("b.gguf"))


@pytest.mark.parametrize("n", [1, 64, MAX_VOCAB_PADDING])
def test_padding_up_to_the_bound_is_compatible_either_way(n: int) -> None:
    assert compatibility_problems(padded(info(), n), info()) == []
    assert compatibility_problems(info(), padded(info(), n)) == []
    check_compatible(padded(info(), n), info())


def test_padding_past_the_bound_is_refused_naming_the_sizes() -> None:
    n = MAX_VOCAB_PADDING + 1
    assert compatibility_problems(padded(info(), n), info()) == [
        f"vocabulary size {6 + n} vs 6 (sizes may differ by at most 128 padding tokens)"]


def test_each_difference_is_named() -> None:
    other = info(
        "draft.gguf",
        vocab_type="spm",
        pre="llama3",
        n_tokens=200,
        specials={"bos": 0, "eos": 2, "eot": None, "pad": 5},
        add_bos=True,
        eog=frozenset({2}),
        texts=(b"<s>", b"</s>", b"x", b"b", b"e", b"cd", b"extra"),
        types=(CONTROL, CONTROL, NORMAL, CONTROL, NORMAL, NORMAL, NORMAL),
    )
    problems = compatibility_problems(info(), other)
    assert "tokenizer type bpe vs spm" in problems
    assert "pre-tokenizer qwen2 vs llama3" in problems
    assert any(p.startswith("vocabulary size 6 vs 200 ") for p in problems)
    assert "eos token 1 vs 2" in problems
    assert "pad token none vs 5" in problems
    assert "adds BOS no vs yes" in problems
    assert any(p.startswith("end-of-generation tokens differ") for p in problems)
    assert "2 of 6 token texts differ (id 2: 'a' vs 'x', id 4: 'é' vs 'e')" in problems
    assert "1 of 6 token types differ (id 3 'b': normal vs control)" in problems


def test_a_shared_id_with_another_text_or_kind_is_refused_even_when_padded() -> None:
    renamed = padded(info(texts=(b"<s>", b"</s>", b"a", b"B", b"\xc3\xa9", b"cd")), 64)
    (problem,) = compatibility_problems(renamed, info())
    assert problem == "1 of 6 token texts differ (id 3: 'B' vs 'b')"
    retyped = padded(info(types=(CONTROL, CONTROL, NORMAL, NORMAL, NORMAL, CONTROL)), 3)
    (problem,) = compatibility_problems(info(), retyped)
    assert problem == "1 of 6 token types differ (id 5 'cd': normal vs control)"


def test_many_text_differences_are_summarised() -> None:
    a = info(n_tokens=100, texts=tuple(bytes([65 + i % 26]) * 2 for i in range(100)), types=())
    b = dataclasses.replace(a, texts=tuple(b"z" for _ in range(100)))
    (problem,) = compatibility_problems(a, b)
    assert problem.startswith("100 of 100 token texts differ (id 0: 'AA' vs 'z'")
    assert problem.endswith(", ...)")


def test_a_qwen_sized_check_is_fast() -> None:
    """It runs at every load of a pair: 152k ids must compare in well under a second."""
    texts = [f"tok{i}".encode() for i in range(151936)]
    small = info(n_tokens=151936, texts=texts, types=np.full(151936, NORMAL, dtype=np.int32))
    big = padded(small, 128)
    start = time.process_time()
    assert compatibility_problems(big, small) == []
    # Generous: the real cost is a few ms; a Python loop per id with slicing would be ~10x.
    assert time.process_time() - start < 1.0


def test_check_compatible_raises_usage_error_naming_both_models() -> None:
    with pytest.raises(UsageError) as caught:
        check_compatible(info("target.gguf"), info("draft.gguf", n_tokens=600, pre="gpt2"))
    message = str(caught.value)
    assert message.startswith("draft draft.gguf cannot draft for target target.gguf: ")
    assert "vocabulary size 6 vs 600" in message and "pre-tokenizer qwen2 vs gpt2" in message
    assert "\n" not in message
    assert caught.value.exit_code == 2
