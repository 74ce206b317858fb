"""Opening local models: a draft of another vocabulary than the target's drafts text only when
the user named it; any other such draft is refused, naming the difference."""

from __future__ import annotations

import pytest

from specchat.backend.loading import text_vocabs
from specchat.errors import UsageError
from specchat.settings.load import LoadSettings
from tests.support.llmstubs import info


class Described:
    """A loaded model as far as the vocabulary check reads it."""

    def __init__(self, vocab: object) -> None:
        self.vocab = vocab

    def vocab_info(self) -> object:
        return self.vocab


def test_only_a_draft_asked_for_by_name_may_speak_another_vocabulary() -> None:
    target, same = Described(info("t.gguf")), Described(info("s.gguf"))
    other = Described(info("o.gguf", vocab_type="spm", n_tokens=300))
    named, preset = LoadSettings(draft="o.gguf"), LoadSettings(draft=None)
    assert text_vocabs(named, target, same) is None  # type: ignore[arg-type]
    assert text_vocabs(named, target, other) is not None  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cannot draft for target t.gguf: tokenizer type"):
        text_vocabs(preset, target, other)  # type: ignore[arg-type]
