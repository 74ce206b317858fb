"""The memo of model headers is merged, not overwritten, when processes save it at once."""

from __future__ import annotations

from pathlib import Path

from specchat.models.headers import Headers
from tests.support.together import run_together


def _remember(memo: str, files: list[str]) -> None:
    for name in files:
        headers = Headers(Path(memo))  # a start: read the memo, learn one file, save
        headers.remember_eog(Path(name), frozenset({len(name)}))
        headers.save()


def test_starts_saving_at_once_keep_each_others_entries(tmp_path: Path) -> None:
    memo = tmp_path / "cache" / "local-headers.json"
    groups = []
    for who in range(3):
        group = [str(tmp_path / f"model-{who}-{i}.gguf") for i in range(40)]
        for name in group:
            Path(name).write_bytes(b"GGUF")
        groups.append(group)
    assert run_together(_remember, [(str(memo), group) for group in groups]) == [0, 0, 0]
    headers = Headers(memo)
    for name in (n for group in groups for n in group):
        assert headers.eog(Path(name), 1000) == frozenset({len(name)})


def test_a_memo_forgets_files_that_are_gone(tmp_path: Path) -> None:
    memo, gone, kept = tmp_path / "memo.json", tmp_path / "gone.gguf", tmp_path / "kept.gguf"
    for path in (gone, kept):
        path.write_bytes(b"GGUF")
        headers = Headers(memo)
        headers.remember_eog(path, frozenset({1}))
        headers.save()
    gone.unlink()
    headers = Headers(memo)
    headers.remember_eog(kept, frozenset({2}))
    headers.save()
    assert set(Headers(memo).entries) == {str(kept)}
