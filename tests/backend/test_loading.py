"""Opening local models: a draft of another vocabulary than the target's drafts text only when
the user named it; any other such draft is refused, naming the difference. A pair whose
vocabulary prints are remembered is judged without reading either vocabulary again."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.calibration import CONFIRMED, DRAFT_SIZES, TARGET_SIZES
from specchat.backend.calibrationfile import machine_key
from specchat.backend.loading import draft_not_worth_loading, text_vocabs
from specchat.backend.tuning import Calibration, flash_attn_for
from specchat.engine.options import Spec
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
    memo = tmp_path / "memo.json"
    first = text_vocabs(settings, target, draft, Headers(memo))  # type: ignore[arg-type]
    assert first is None and (target.reads, draft.reads) == (1, 1)
    again = text_vocabs(settings, target, draft, Headers(memo))  # type: ignore[arg-type]
    assert again is None and (target.reads, draft.reads) == (1, 1)


def test_a_rewritten_file_or_a_foreign_vocabulary_is_read_and_judged_again(
        tmp_path: Path) -> None:
    target, draft = described(tmp_path, "t.gguf"), described(tmp_path, "d.gguf")
    settings = LoadSettings(draft=None)
    memo = tmp_path / "memo.json"
    text_vocabs(settings, target, draft, Headers(memo))  # type: ignore[arg-type]
    # Another model under the draft's name: the memo's stamp no longer matches the file.
    draft.path.write_bytes(b"another model, another size")
    draft.vocab = info("d.gguf", texts=(b"<s>", b"</s>", b"x", b"b", b"\xc3\xa9", b"cd"))
    with pytest.raises(UsageError, match="token texts differ"):
        text_vocabs(settings, target, draft, Headers(memo))  # type: ignore[arg-type]
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


# --- a draft model auto could never draft with ---------------------------------------------
def calibrated(tmp_path: Path, settings: LoadSettings, target_step: float,
               target_ratios: list[float], draft_step: float, final: bool = True
               ) -> tuple[Calibration, Path, Path]:
    """A calibration file holding tables for a target and a draft, keyed as a start on the
    CPU keys them, every size final (or not)."""
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"t")
    draft.write_bytes(b"d")
    cal = Calibration(settings, "", path=tmp_path / "calibration.json")
    knobs = cal.costs_knobs(flash_attn_for(settings, cal, target, on_cpu=True), settings.exact)
    quiet = CONFIRMED if final else 0
    for path, sizes, seconds in (
            (target, TARGET_SIZES, [target_step * r for r in target_ratios]),
            (draft, DRAFT_SIZES, [draft_step * n for n in DRAFT_SIZES])):
        table = seconds if path == target else [draft_step * n for n in range(1, 18)]
        samples = {str(n): [seconds[i], quiet, quiet] for i, n in enumerate(sizes)}
        cal.cache.save_entry(machine_key(path, knobs), {"seconds": table, "samples": samples})
    return cal, target, draft


CPU = [1.0, 1.67, 2.21, 2.74, 3.38, 3.8, 4.8, 5.88, 6.0, 6.2, 6.4, 6.6, 6.8, 6.9, 7.0, 5.67, 6.31]
FLAT = [1.0 + 0.02 * i for i in range(17)]


def test_an_auto_answer_leaves_out_a_draft_that_could_never_pay(tmp_path: Path) -> None:
    settings = LoadSettings(draft_on_demand=True)
    cal, target, draft = calibrated(tmp_path, settings, 0.03, CPU, 0.54 * 0.03)
    assert draft_not_worth_loading(settings, cal, target, draft, 0) == pytest.approx(0.54)


def test_a_draft_that_could_pay_somewhere_is_loaded(tmp_path: Path) -> None:
    settings = LoadSettings(draft_on_demand=True)
    cal, target, draft = calibrated(tmp_path, settings, 0.03, FLAT, 0.1 * 0.03)
    assert draft_not_worth_loading(settings, cal, target, draft, 0) is None


def test_without_a_finished_calibration_the_draft_is_loaded_and_measured(
        tmp_path: Path) -> None:
    settings = LoadSettings(draft_on_demand=True)
    cal, target, draft = calibrated(tmp_path, settings, 0.03, CPU, 0.54 * 0.03, final=False)
    assert draft_not_worth_loading(settings, cal, target, draft, 0) is None
    empty = Calibration(settings, "", path=tmp_path / "none.json")
    assert draft_not_worth_loading(settings, empty, target, draft, 0) is None


@pytest.mark.parametrize("settings", [LoadSettings(), LoadSettings(draft_on_demand=True,
                                                                   spec=Spec.DRAFT)])
def test_a_command_that_may_draft_with_the_model_always_loads_it(
        tmp_path: Path, settings: LoadSettings) -> None:
    cal, target, draft = calibrated(tmp_path, settings, 0.03, CPU, 0.54 * 0.03)
    assert draft_not_worth_loading(settings, cal, target, draft, 0) is None


def test_remembered_end_of_generation_ids_hold_only_for_the_same_file(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"one")
    memo = Headers(tmp_path / "memo.json")
    memo.remember_eog(model, frozenset({7, 3}))
    memo.save()
    assert Headers(tmp_path / "memo.json").eog(model, 10) == frozenset({3, 7})
    assert Headers(tmp_path / "memo.json").eog(model, 5) is None  # 7 is not an id of 5
    model.write_bytes(b"other")  # rewritten: its size and mtime differ
    assert Headers(tmp_path / "memo.json").eog(model, 10) is None


def test_a_summary_and_the_ids_of_one_file_share_its_entry(tmp_path: Path) -> None:
    target = described(tmp_path, "t.gguf")
    memo = Headers(tmp_path / "memo.json")
    memo.remember_eog(target.path, frozenset({1}))
    text_vocabs(LoadSettings(draft=None), target, described(tmp_path, "d.gguf"),  # type: ignore[arg-type]
                memo)
    again = Headers(tmp_path / "memo.json")
    assert again.eog(target.path, 10) == frozenset({1})
    assert again.summary(target.path, read=False) is not None
    again.remember_eog(target.path, frozenset({2}))
    assert again.summary(target.path, read=False) is not None
