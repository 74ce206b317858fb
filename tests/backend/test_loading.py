"""Opening local models: a draft of another vocabulary than the target's drafts text only when
the user named it; any other such draft is refused, naming the difference. A pair whose
vocabulary prints are remembered is judged without reading either vocabulary again."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.loading import text_vocabs
from specchat.errors import UsageError
from specchat.llm.vocab import VocabInfo
from specchat.models.headers import Headers
from specchat.settings.load import LoadSettings
from tests.support.llmstubs import info


class Described:
    """A loaded model as far as the vocabulary check reads it; counts its reads."""

    def __init__(self, vocab: VocabInfo, path: Path) -> None:
        self.vocab = vocab
        self.path = path
        self.metadata = {"general.architecture": "qwen2"}
        self.reads = 0

    def vocab_info(self) -> VocabInfo:
        self.reads += 1
        return self.vocab


def described(tmp_path: Path, name: str, **changes: object) -> Described:
    path = tmp_path / name
    path.write_bytes(name.encode())
    return Described(info(name, **changes), path)


def test_only_a_draft_asked_for_by_name_may_speak_another_vocabulary(tmp_path: Path) -> None:
    target, same = described(tmp_path, "t.gguf"), described(tmp_path, "s.gguf")
    other = described(tmp_path, "o.gguf", vocab_type="spm", n_tokens=300)
    named, preset = LoadSettings(draft="o.gguf"), LoadSettings(draft=None)
    memo = Headers(tmp_path / "memo.json")
    assert text_vocabs(named, target, same, memo) is None  # type: ignore[arg-type]
    assert text_vocabs(named, target, other, memo) is not None  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cannot draft for target t.gguf: tokenizer type"):
        text_vocabs(preset, target, other, memo)  # type: ignore[arg-type]


def test_a_pair_found_to_share_a_vocabulary_is_not_read_again_at_the_next_start(
        tmp_path: Path) -> None:
    target, draft = described(tmp_path, "t.gguf"), described(tmp_path, "d.gguf")
    settings = LoadSettings(draft=None)
    first = text_vocabs(settings, target, draft, Headers(tmp_path / "memo.json"))  # type: ignore[arg-type]
    assert first is None and (target.reads, draft.reads) == (1, 1)
    again = text_vocabs(settings, target, draft, Headers(tmp_path / "memo.json"))  # type: ignore[arg-type]
    assert again is None and (target.reads, draft.reads) == (1, 1)


def test_a_rewritten_file_or_a_foreign_vocabulary_is_read_and_judged_again(
        tmp_path: Path) -> None:
    target, draft = described(tmp_path, "t.gguf"), described(tmp_path, "d.gguf")
    settings = LoadSettings(draft=None)
    text_vocabs(settings, target, draft, Headers(tmp_path / "memo.json"))  # type: ignore[arg-type]
    # Another model under the draft's name: the memo's stamp no longer matches the file.
    draft.path.write_bytes(b"another model, another size")
    draft.vocab = info("d.gguf", texts=(b"<s>", b"</s>", b"x", b"b", b"\xc3\xa9", b"cd"))
    with pytest.raises(UsageError, match="token texts differ"):
        text_vocabs(settings, target, draft, Headers(tmp_path / "memo.json"))  # type: ignore[arg-type]
    assert draft.reads == 2


def test_prints_of_a_foreign_vocabulary_never_stand_in_for_reading_it(tmp_path: Path) -> None:
    target, other = described(tmp_path, "t.gguf"), described(tmp_path, "o.gguf", pre="llama3")
    memo = Headers(tmp_path / "memo.json")
    from specchat.llm.files import summary_of

    for model in (target, other):  # both remembered, as a model listing leaves them
        memo.remember(model.path, summary_of(model.metadata, model.vocab))
    with pytest.raises(UsageError, match="pre-tokenizer"):
        text_vocabs(LoadSettings(draft=None), target, other, memo)  # type: ignore[arg-type]
    assert (target.reads, other.reads) == (1, 1)
