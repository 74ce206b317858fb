"""The prompt cache's policy on a fake model: hits, misses, longest prefix, LRU, size bound,
damaged entries, atomic files. The real state save/load is in test_promptcache_real.py."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from specchat.backend import promptcache as pc
from specchat.backend.promptcache import PromptCache
from specchat.engine.drafters import fill_cache
from specchat.errors import ModelError, UsageError
from specchat.paths import prompt_cache_dir
from specchat.settings.schema import env_values, parse_size
from tests.support.fakes import FakeModel


class StatefulFake(FakeModel):
    """A FakeModel whose 'KV state' is its token list, serialized with some padding bytes so
    that entries have a size worth bounding. Counts loads."""

    def __init__(self, key: str = "model-a", pad: int = 1000, **kw: object) -> None:
        super().__init__(n_vocab=50, n_ctx=4096, **kw)  # type: ignore[arg-type]
        self.key = key
        self.pad = pad
        self.loads = 0

    @property
    def state_key(self) -> str:
        return self.key

    def save_state(self) -> bytes:
        return np.asarray(self.tokens, dtype="<i4").tobytes() + b"\x00" * self.pad

    def load_state(self, tokens: Sequence[int], blob: bytes) -> None:
        self.truncate(0)
        ids = np.frombuffer(blob[: 4 * len(tokens)], dtype="<i4")
        if list(ids) != list(tokens):
            raise ModelError("state does not match its tokens")
        self._tokens = [int(t) for t in tokens]
        self.loads += 1


def prefilled(tokens: Sequence[int], **kw: object) -> StatefulFake:
    model = StatefulFake(**kw)  # type: ignore[arg-type]
    fill_cache(model, tokens)
    return model


def prompt(n: int, tail: Sequence[int] = ()) -> list[int]:
    return [i % 40 for i in range(n)] + list(tail)


class KeyCounting(StatefulFake):
    """Counts how often its state key (a real model's costs a file fingerprint) is read."""

    keys_read = 0

    @property
    def state_key(self) -> str:
        self.keys_read += 1
        return self.key


def test_no_fingerprint_for_a_short_prompt_or_an_empty_cache(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path / "none-yet", min_new_tokens=10)
    model = KeyCounting()
    assert cache.restore(model, prompt(600)) == 0 and model.keys_read == 0  # no entries
    cache.save(prefilled(prompt(600)), evaluated=600)
    assert cache.restore(model, prompt(pc.MIN_GAIN - 1)) == 0 and model.keys_read == 0
    assert cache.restore(model, prompt(600, [41])) == 600 and model.keys_read == 1


def test_an_answer_takes_part_in_the_cache_without_reading_the_models_key(
        tmp_path: Path) -> None:
    from specchat.engine.options import GenerationOptions, SamplingOptions
    from tests.support.fake_runtime import fake_runtime

    model = KeyCounting()
    runtime = fake_runtime(target=model)  # type: ignore[arg-type]
    runtime.prompt_cache = PromptCache(tmp_path, min_new_tokens=10)
    greedy = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=3,
                               spec="off")
    list(runtime.stream(prompt(20), greedy))  # a short prompt: nothing could be restored
    assert model.keys_read == 0
    runtime.prompt_cache.save(prefilled(prompt(600)), evaluated=600)
    model.truncate(0)
    list(runtime.stream(prompt(600, [41]), greedy))
    assert model.loads == 1 and model.keys_read == 1


def test_second_call_loads_the_longest_shared_prefix(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    first = prompt(600, [41, 42, 43])
    assert cache.save(prefilled(first), evaluated=len(first)) is not None
    shorter = prompt(300, [44])
    assert cache.save(prefilled(shorter), evaluated=len(shorter)) is not None

    fresh = StatefulFake()
    second = prompt(600, [45, 46])  # same 600-token prefix, another question
    assert cache.restore(fresh, second) == 600
    assert list(fresh.tokens) == second[:600]
    assert fresh.loads == 1
    # The engine's prefill then evaluates only the rest.
    assert fill_cache(fresh, second) == 2


def test_miss_for_another_model_or_unrelated_prompt(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    cache.save(prefilled(prompt(500)), evaluated=500)
    other_model = StatefulFake(key="model-b")
    assert cache.restore(other_model, prompt(500)) == 0
    unrelated = StatefulFake()
    assert cache.restore(unrelated, [45] * 500) == 0
    assert unrelated.loads == 0 and other_model.loads == 0


def test_no_load_when_the_model_already_holds_as_much(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    cache.save(prefilled(prompt(500)), evaluated=500)
    warm = prefilled(prompt(490))  # a chat's own KV reuse already covers nearly all of it
    assert cache.restore(warm, prompt(500, [41])) == 0
    assert warm.loads == 0 and len(warm.tokens) == 490


def test_small_prefills_are_not_saved(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path)  # default threshold
    assert cache.save(prefilled(prompt(100)), evaluated=100) is None
    assert cache.save(prefilled(prompt(2000)), evaluated=pc.MIN_NEW_TOKENS - 1) is None
    assert not list(tmp_path.glob("*.kv"))


def test_entry_too_long_for_the_context_is_skipped(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    cache.save(prefilled(prompt(600)), evaluated=600)
    small = StatefulFake()
    small._n_ctx = 500
    assert cache.restore(small, prompt(600)) == 0


def test_lru_eviction_keeps_the_size_bound(tmp_path: Path) -> None:
    # One entry's size on disk, as this cache writes it (measured apart from the bound).
    scratch = PromptCache(tmp_path / "one", min_new_tokens=10)
    measured = scratch.save(prefilled([39] + prompt(299)), evaluated=300)
    assert measured is not None
    entry = measured.stat().st_size
    cache = PromptCache(tmp_path, limit=int(entry * 2.5), min_new_tokens=10)
    paths = []
    for i in range(3):
        tokens = [40 + i] + prompt(299)
        paths.append(cache.save(prefilled(tokens), evaluated=300))
        os.utime(paths[-1], (1000 + i, 1000 + i))  # distinct, ordered mtimes
    # Three do not fit: the oldest went when the third was written.
    assert not paths[0].exists() and paths[1].exists() and paths[2].exists()
    # A hit refreshes an entry: now paths[2] is the least recently used.
    assert cache.restore(StatefulFake(), [41] + prompt(299)) == 300
    cache.save(prefilled([43] + prompt(299)), evaluated=300)
    assert paths[1].exists() and not paths[2].exists()
    total = sum(p.stat().st_size for p in tmp_path.glob("*.kv"))
    assert total <= cache.limit


def test_an_entry_bigger_than_the_limit_is_not_written(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, limit=500, min_new_tokens=10)
    assert cache.save(prefilled(prompt(400)), evaluated=400) is None
    assert not list(tmp_path.glob("*.kv"))


def test_limit_zero_turns_the_cache_off(tmp_path: Path) -> None:
    on = PromptCache(tmp_path, min_new_tokens=10)
    on.save(prefilled(prompt(400)), evaluated=400)
    off = PromptCache(tmp_path, limit=0, min_new_tokens=10)
    model = StatefulFake()
    assert off.restore(model, prompt(400)) == 0
    assert off.save(prefilled(prompt(500)), evaluated=500) is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entry_is_never_loaded_and_is_removed(tmp_path: Path, damage: str) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    path = cache.save(prefilled(prompt(400)), evaluated=400)
    assert path is not None
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) - 100])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "garbage":
        path.write_bytes(b"not a cache entry at all" * 10)
    else:
        path.write_bytes(b"")
    model = StatefulFake()
    assert cache.restore(model, prompt(400, [41])) == 0
    assert model.loads == 0 and not model.tokens
    assert not path.exists()


def test_a_state_the_model_refuses_is_removed_and_leaves_the_model_empty(
        tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    path = cache.save(prefilled(prompt(400)), evaluated=400)
    assert path is not None

    class Refusing(StatefulFake):
        def load_state(self, tokens: Sequence[int], blob: bytes) -> None:
            self.truncate(0)
            raise ModelError("a saved state does not fit")

    model = Refusing()
    assert cache.restore(model, prompt(400)) == 0
    assert not model.tokens and not path.exists()


def test_files_are_private_whole_and_named_by_model_and_tokens(tmp_path: Path) -> None:
    directory = tmp_path / "prompt-cache"
    cache = PromptCache(directory, min_new_tokens=10)
    path = cache.save(prefilled(prompt(400)), evaluated=400)
    assert path is not None and path.name == pc.entry_name("model-a", prompt(400))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temporary left over
    head = path.read_bytes()[len(pc.MAGIC) + 4:]
    meta = json.loads(head[: head.index(b"}") + 1])
    assert meta["key"] == "model-a" and meta["n_tokens"] == 400
    # Saving the same prompt again reuses the file.
    assert cache.save(prefilled(prompt(400)), evaluated=400) == path


def test_temporary_files_of_dead_writers_are_swept_but_fresh_ones_kept(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    stale = tmp_path / ".x.kv.123.abcd.tmp"
    fresh = tmp_path / ".y.kv.456.ef01.tmp"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    os.utime(stale, (1, 1))
    assert cache.restore(StatefulFake(), prompt(400)) == 0  # temporaries are never entries
    cache.save(prefilled(prompt(400)), evaluated=400)
    assert not stale.exists() and fresh.exists()


def test_a_failed_write_costs_the_entry_not_the_answer(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    cache = PromptCache(blocker / "prompt-cache", min_new_tokens=10)
    assert cache.save(prefilled(prompt(400)), evaluated=400) is None


def test_clear_removes_every_entry(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    cache.save(prefilled(prompt(400)), evaluated=400)
    cache.save(prefilled(prompt(500)), evaluated=500)
    assert cache.clear() == 2 and not list(tmp_path.glob("*.kv"))


def test_where_it_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECCHAT_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert prompt_cache_dir() == tmp_path / "xdg" / "specchat" / "prompt-cache"
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    assert prompt_cache_dir() == tmp_path / "home" / "prompt-cache"


@pytest.mark.parametrize(("value", "expected"), [
    ("2G", pc.DEFAULT_LIMIT), ("0", 0), ("off", 0), ("500M", 500 * 1024**2),
    ("2G", 2 * 1024**3), ("1.5g", int(1.5 * 1024**3)), ("4096", 4096), ("64MiB", 64 * 1024**2),
])
def test_size_limit_values(value: str, expected: int) -> None:
    assert parse_size(value) == expected


def test_size_limit_refuses_nonsense() -> None:
    with pytest.raises(UsageError, match="SPECCHAT_PROMPT_CACHE.*2G or 500M"):
        env_values(["prompt_cache"], {"SPECCHAT_PROMPT_CACHE": "lots"})


class StatefulWordModel(StatefulFake):
    """The fake runtime's vocabulary, with savable state."""

    def __init__(self) -> None:
        super().__init__()
        from tests.support.fake_runtime import EOS, WORDS
        self._n_vocab = len(WORDS)
        self._eog = frozenset({EOS})
        self.pieces = [w.encode() for w in WORDS]


def test_bench_times_the_first_token_cold_and_warm_through_the_cache(tmp_path: Path) -> None:
    from specchat.bench.prompts import BenchPrompt
    from specchat.bench.report import to_json
    from specchat.bench.runner import run_bench
    from specchat.engine.options import GenerationOptions, SamplingOptions
    from tests.support.fake_runtime import fake_runtime

    target = StatefulWordModel()
    runtime = fake_runtime(target=target)  # type: ignore[arg-type]
    prompts = [BenchPrompt("q1", "rag", "a long shared document " * 20 + "first?"),
               BenchPrompt("q2", "qa", "another text entirely " * 20 + "second?")]
    options = GenerationOptions(sampling=SamplingOptions(temperature=0.0), max_tokens=6,
                                spec="off")
    cache = PromptCache(tmp_path, min_new_tokens=0)
    result = run_bench(runtime, prompts, ["off", "ngram"], options, prompt_cache=cache,
                       warmup=False)
    assert [f.question_id for f in result.first_tokens] == ["q1", "q2"]
    for first in result.first_tokens:
        assert first.restored == first.prompt_tokens - 1  # all but the last token loaded
        assert first.cold_seconds > 0 and first.warm_seconds > 0
    assert target.loads == 2
    assert runtime.prompt_cache is None and not list(tmp_path.glob("*.kv"))
    doc = to_json(result, ["off", "ngram"], {})
    assert set(doc["first_token"]["summary"]) == {"rag", "qa", "overall"}
    assert doc["first_token"]["summary"]["overall"]["prompts"] == 2


def test_an_entry_that_is_a_fifo_is_a_miss_not_a_hang(tmp_path: Path) -> None:
    """A FIFO (or a device) under an entry's name is no entry: opening it for reading would
    wait for a writer forever."""
    import threading

    cache = PromptCache(tmp_path, min_new_tokens=10)
    tokens = prompt(300, [41])
    fifo = tmp_path / pc.entry_name("model-a", tokens)
    os.mkfifo(fifo)
    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(cache.restore(StatefulFake(), tokens)),
                              daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the reader go
        pytest.fail("the prompt cache blocked on a FIFO")
    assert got == [0]


def test_a_folder_under_an_entrys_name_is_a_miss_and_kept(tmp_path: Path) -> None:
    cache = PromptCache(tmp_path, min_new_tokens=10)
    tokens = prompt(300, [41])
    folder = tmp_path / pc.entry_name("model-a", tokens)
    folder.mkdir()
    assert cache.restore(StatefulFake(), tokens) == 0
    assert folder.is_dir()  # not ours to remove
