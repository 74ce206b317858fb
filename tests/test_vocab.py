"""Vocabulary compatibility messages (pure, on hand-made VocabInfo objects)."""

from __future__ import annotations

import dataclasses

import pytest

from specchat.errors import UsageError
from specchat.llm.vocab import VocabInfo, check_compatible, compatibility_problems


def info(name: str = "a.gguf", **changes: object) -> VocabInfo:
    base = VocabInfo(
        name=name,
        vocab_type="bpe",
        n_tokens=6,
        specials={"bos": 0, "eos": 1, "eot": None, "pad": None},
        add_bos=False,
        add_eos=False,
        eog=frozenset({1}),
        texts=(b"<s>", b"</s>", b"a", b"b", b"\xc3\xa9", b"cd"),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_identical_vocabularies_are_compatible() -> None:
    assert compatibility_problems(info(), info("b.gguf")) == []
    check_compatible(info(), info("b.gguf"))


def test_each_difference_is_named() -> None:
    other = info(
        "draft.gguf",
        vocab_type="spm",
        n_tokens=7,
        specials={"bos": 0, "eos": 2, "eot": None, "pad": 5},
        add_bos=True,
        eog=frozenset({2}),
        texts=(b"<s>", b"</s>", b"x", b"b", b"e", b"cd", b"extra"),
    )
    problems = compatibility_problems(info(), other)
    assert "tokenizer type bpe vs spm" in problems
    assert "vocabulary size 6 vs 7" in problems
    assert "eos token 1 vs 2" in problems
    assert "pad token none vs 5" in problems
    assert "adds BOS no vs yes" in problems
    assert any(p.startswith("end-of-generation tokens differ") for p in problems)
    assert "2 of 6 token texts differ (id 2: 'a' vs 'x', id 4: 'é' vs 'e')" in problems


def test_many_text_differences_are_summarised() -> None:
    a = info(n_tokens=100, texts=tuple(bytes([65 + i % 26]) * 2 for i in range(100)))
    b = dataclasses.replace(a, texts=tuple(b"z" for _ in range(100)))
    (problem,) = compatibility_problems(a, b)
    assert problem.startswith("100 of 100 token texts differ (id 0: 'AA' vs 'z'")
    assert problem.endswith(", ...)")


def test_check_compatible_raises_usage_error_naming_both_models() -> None:
    with pytest.raises(UsageError) as caught:
        check_compatible(info("target.gguf"), info("draft.gguf", n_tokens=9))
    message = str(caught.value)
    assert message.startswith("draft draft.gguf cannot draft for target target.gguf: ")
    assert "vocabulary size 6 vs 9" in message
    assert "\n" not in message
    assert caught.value.exit_code == 2
