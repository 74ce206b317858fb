"""The llama.cpp model layer on real GGUF files (SmolLM2-135M, Gemma-3-270M).

Models come through specchat's own pull code (tests/conftest.py) and load once per module;
each test starts from an empty cache. Measured on the 2-core CI machine with
llama-cpp-python 0.3.36: SmolLM2 (Q4_1) batch and single-step logits are bit-identical
(max abs diff 0.0); Gemma-3 (Q4_K_M) batches of 8 or more tokens take another CPU kernel and
differ by up to ~2.5 logits (argmax agreeing), so the Gemma check is the one of
docs/exactness.md: where the argmax differs, the top two must be near a tie.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.drafters import fill_cache
from specchat.engine.protocol import ContextFullError, LogitsModel
from specchat.engine.text import TextStream
from specchat.errors import ModelError, UsageError
from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.vocab import check_compatible, compatibility_problems

llama_cpp = pytest.importorskip("llama_cpp",
                              reason="llama-cpp-python is not installed (see backends/)")
backend = pytest.importorskip("specchat.llm.model")
files = pytest.importorskip("specchat.llm.files")

real = pytest.mark.real
REPO = Path(__file__).resolve().parents[2]
PROMPT = "The quick brown fox jumps over the lazy dog. In 1969, humans first walked on the"
# One thread: these tests check results, not speed, and on a shared 2-core machine a second
# OpenMP thread that spin-waits for a busy core stalls single decodes for seconds.
THREADS = 1
MULTIBYTE = "Héllo wörld, façade naïve — 日本語のテキスト, 中文, runes ᚠᛇᚻ 𓀀 and emoji 👋🏽🎉 ✓"


# --- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol_path(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("smollm2-135m")


@pytest.fixture(scope="module")
def gemma_path(real_model_path: Callable[[str], Path]) -> Path:
    return real_model_path("gemma3-270m")


@pytest.fixture(scope="module")
def _smol(smol_path: Path) -> Iterator[backend.LlamaModel]:
    with backend.load_model(smol_path, n_ctx=512, n_threads=THREADS) as model:
        yield model


@pytest.fixture(scope="module")
def _gemma(gemma_path: Path) -> Iterator[backend.LlamaModel]:
    with backend.load_model(gemma_path, n_ctx=512, n_threads=THREADS) as model:
        yield model


@pytest.fixture
def smol(_smol: backend.LlamaModel) -> backend.LlamaModel:
    _smol.truncate(0)
    return _smol


@pytest.fixture
def gemma(_gemma: backend.LlamaModel) -> backend.LlamaModel:
    _gemma.truncate(0)
    return _gemma


def consistent(model: backend.LlamaModel) -> bool:
    """The protocol invariant: `tokens` is exactly what llama.cpp's cache holds."""
    return model.cached_positions() == len(model.tokens)


def single_steps(model: backend.LlamaModel, tokens: list[int]) -> np.ndarray:
    model.truncate(0)
    return np.stack([model.eval([t], [0])[0] for t in tokens])


# --- logits --------------------------------------------------------------------------------------
@real
def test_implements_the_engine_protocol(smol: backend.LlamaModel) -> None:
    assert isinstance(smol, LogitsModel)
    assert smol.n_vocab == 49152 and smol.n_ctx == 512
    assert smol.architecture == "llama" and not smol.is_recurrent
    assert {0, 2} <= smol.eog_tokens  # <|endoftext|>, <|im_end|>


@real
def test_batch_logits_equal_single_steps_smollm2(smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT)
    batch = smol.eval(tokens, list(range(len(tokens))))
    assert batch.dtype == np.float32 and batch.shape == (len(tokens), smol.n_vocab)
    singles = single_steps(smol, tokens)
    diff = float(np.abs(batch - singles).max())
    print(f"SmolLM2 batch-vs-single max abs logit diff over {len(tokens)} rows: {diff:g}")
    assert diff <= 1e-3
    assert consistent(smol)


@real
def test_batch_logits_differ_from_single_steps_only_near_ties_gemma(
        gemma: backend.LlamaModel) -> None:
    tokens = gemma.tokenize(PROMPT, add_special=True)
    batch = gemma.eval(tokens, list(range(len(tokens))))
    singles = single_steps(gemma, tokens)
    row_diff = np.abs(batch - singles).max(axis=1)
    print(f"Gemma-3 batch-vs-single max abs logit diff: {row_diff.max():g}")
    top2 = np.sort(singles, axis=1)[:, -2:]
    for row in np.flatnonzero(batch.argmax(axis=1) != singles.argmax(axis=1)):
        assert top2[row, 1] - top2[row, 0] <= 2 * row_diff[row], f"row {row} is not a near tie"
    assert row_diff.max() < 5.0  # float noise, not a wrong position or a stale cache


@real
def test_subset_duplicate_and_negative_rows(smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT)
    full = smol.eval(tokens, list(range(len(tokens))))
    smol.truncate(0)
    some = smol.eval(tokens, [3, -1, 3, -len(tokens)])
    np.testing.assert_array_equal(some, full[[3, -1, 3, 0]])


@real
def test_eval_with_no_rows_still_fills_the_cache(smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT)
    out = smol.eval(tokens[:-1], [])
    assert out.shape == (0, smol.n_vocab)
    assert list(smol.tokens) == tokens[:-1] and consistent(smol)
    last = smol.eval(tokens[-1:], [-1])
    reference = smol.eval([], [])  # nothing to do, nothing changes
    assert reference.shape == (0, smol.n_vocab) and len(smol.tokens) == len(tokens)
    smol.truncate(0)
    np.testing.assert_array_equal(last, smol.eval(tokens, [-1]))


@real
def test_bad_rows_and_ids_leave_the_cache_alone(smol: backend.LlamaModel) -> None:
    smol.eval([1, 2, 3], [])
    for tokens, rows, error in (([4, 5], [2], IndexError), ([4, 5], [-3], IndexError),
                                ([], [0], IndexError), ([4, smol.n_vocab], [0], ValueError),
                                ([-1], [], ValueError),  # a step's few ids, and a prefill's:
                                ([5] * 99 + [smol.n_vocab], [0], ValueError),
                                ([-1] + [5] * 99, [], ValueError)):
        with pytest.raises(error):
            smol.eval(tokens, rows)
        assert list(smol.tokens) == [1, 2, 3] and consistent(smol)


@real
def test_truncate_then_reevaluate_gives_the_same_logits(smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT)
    keep = 7
    first = smol.eval(tokens, list(range(keep, len(tokens))))
    smol.truncate(keep)
    assert list(smol.tokens) == tokens[:keep] and consistent(smol)
    smol.eval(smol.tokenize(" Completely different words here"), [-1])  # a rejected draft
    smol.truncate(keep)
    again = smol.eval(tokens[keep:], list(range(len(tokens) - keep)))
    np.testing.assert_allclose(again, first, atol=1e-4)
    assert consistent(smol)


@real
def test_truncate_gemma_sliding_window_model(gemma: backend.LlamaModel) -> None:
    # Compared with the same batch split (5, then the rest) evaluated fresh: a whole-prompt
    # batch rounds differently on some CPUs (up to a logit on an AMD EPYC with AVX2), which
    # says nothing about whether the sliding-window cache was cut back correctly.
    tokens = gemma.tokenize(PROMPT, add_special=True)
    gemma.eval(tokens[:5], [])
    first = gemma.eval(tokens[5:], [-1])
    gemma.truncate(5)
    gemma.eval(gemma.tokenize(" zebra zebra zebra"), [])
    gemma.truncate(5)
    np.testing.assert_allclose(gemma.eval(tokens[5:], [-1]), first, atol=1e-3)


@real
def test_long_input_goes_in_chunks_with_rows_in_each(smol_path: Path,
                                                     smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT * 2)
    rows = [2, 9, 17, -1]
    reference = smol.eval(tokens, rows)
    with backend.load_model(smol_path, n_ctx=256, n_threads=THREADS, n_batch=8) as chunked:
        got = chunked.eval(tokens, rows)
        assert consistent(chunked) and list(chunked.tokens) == tokens
    np.testing.assert_allclose(got, reference, atol=1e-3)


@real
def test_context_full_raises_and_changes_nothing(smol_path: Path) -> None:
    with backend.load_model(smol_path, n_ctx=256, n_threads=THREADS) as model:
        n_ctx = model.n_ctx
        model.eval([198] * (n_ctx - 1), [])
        with pytest.raises(ContextFullError) as caught:
            model.eval([198, 198], [-1])
        assert (caught.value.needed, caught.value.n_ctx) == (n_ctx + 1, n_ctx)
        assert len(model.tokens) == n_ctx - 1 and consistent(model)
        assert model.eval([198], [0]).shape == (1, model.n_vocab)  # exactly full is fine
        with pytest.raises(ContextFullError):
            model.eval([198], [])


@real
def test_fill_cache_reuses_the_cached_prefix(smol: backend.LlamaModel) -> None:
    tokens = smol.tokenize(PROMPT)
    expected = smol.eval(tokens, [-1])[0]
    smol.truncate(len(tokens) - 4)
    assert fill_cache(smol, tokens[:-1]) == 3  # only what the cache lost is evaluated again
    np.testing.assert_allclose(smol.eval(tokens[-1:], [-1])[0], expected, atol=1e-4)
    assert list(smol.tokens) == tokens


# --- failures and Ctrl-C keep tokens == cache --------------------------------------------------
@real
def test_interrupt_right_after_decode_drops_that_chunk(
        smol: backend.LlamaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = smol.tokenize(PROMPT)
    smol.eval(tokens[:5], [])
    real_decode = llama_cpp.llama_decode

    def decode_then_ctrl_c(ctx: object, batch: object) -> int:
        real_decode(ctx, batch)
        raise KeyboardInterrupt

    monkeypatch.setattr(llama_cpp, "llama_decode", decode_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        smol.eval(tokens[5:], [-1])
    monkeypatch.undo()
    assert list(smol.tokens) == tokens[:5] and consistent(smol)
    after = smol.eval(tokens[5:], [-1])
    smol.truncate(0)
    np.testing.assert_allclose(after, smol.eval(tokens, [-1]), atol=1e-4)


@real
def test_a_cancelled_batch_stops_between_graph_nodes_on_a_worker_thread(
        smol_path: Path) -> None:
    """A server's worker (not the main thread, where Ctrl-C's abort works) can stop a long
    prefill part way: llama.cpp asks between graph nodes, counted here, not timed. The chunks
    decoded before stay cached and `tokens` says so; the next eval is exact."""
    import threading

    from specchat.errors import Cancelled

    with backend.load_model(smol_path, n_ctx=512, n_threads=THREADS, n_batch=64) as model:
        tokens = model.tokenize(PROMPT * 8)[:200]
        asked: list[int] = []

        def cancelled() -> bool:
            asked.append(1)
            return len(model.tokens) >= 64  # once the first chunk of 64 is in

        outcome: list[BaseException] = []

        def run() -> None:
            model.cancel_when(cancelled)
            try:
                model.eval(tokens, [-1])
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome.append(exc)
            finally:
                model.cancel_when(None)

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        assert len(outcome) == 1 and isinstance(outcome[0], Cancelled)
        assert list(model.tokens) == tokens[:64] and consistent(model)
        # llama.cpp asked once per graph node: the second chunk stopped after its first node
        nodes_per_chunk = len(asked) - 1
        assert 0 < nodes_per_chunk < 10_000
        after = model.eval(tokens[64:], [-1])
        model.truncate(0)
        np.testing.assert_allclose(after, model.eval(tokens, [-1]), atol=1e-4)


@real
def test_failed_decode_keeps_earlier_chunks(smol_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with backend.load_model(smol_path, n_ctx=256, n_threads=THREADS, n_batch=4) as model:
        real_decode = llama_cpp.llama_decode
        calls = []

        def fail_second(ctx: object, batch: object) -> int:
            calls.append(1)
            return 1 if len(calls) == 2 else real_decode(ctx, batch)

        monkeypatch.setattr(llama_cpp, "llama_decode", fail_second)
        with pytest.raises(ModelError, match="llama_decode failed"):
            model.eval(list(range(100, 110)), [-1])
        assert list(model.tokens) == list(range(100, 104)) and consistent(model)


# --- text ----------------------------------------------------------------------------------------
@real
@pytest.mark.parametrize("which", ["smol", "gemma"])
def test_multibyte_round_trip_and_streaming(which: str, request: pytest.FixtureRequest) -> None:
    model: backend.LlamaModel = request.getfixturevalue(which)
    tokens = model.tokenize(MULTIBYTE, parse_special=False)
    assert b"".join(model.token_bytes(t) for t in tokens).decode() == MULTIBYTE
    stream = TextStream()
    chunks = [stream.push(model.token_bytes(t)) for t in tokens] + [stream.flush()]
    assert "".join(chunks) == MULTIBYTE
    assert not any("\ufffd" in chunk for chunk in chunks)
    split = [t for t in tokens if not _decodes(model.token_bytes(t))]
    assert split, "the text should contain characters split across tokens"


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@real
def test_special_tokens_parse_only_when_asked(smol: backend.LlamaModel,
                                              gemma: backend.LlamaModel) -> None:
    assert smol.tokenize("<|im_start|>user")[0] == 1
    assert 1 not in smol.tokenize("<|im_start|>user", parse_special=False)
    assert smol.token_bytes(2) == b"<|im_end|>" and smol.token_text(2) == "<|im_end|>"
    assert gemma.tokenize("Hi", add_special=True)[0] == gemma.bos_token == 2
    assert smol.tokenize("Hi", add_special=True)[0] != smol.bos_token  # SmolLM2 adds no BOS


# --- chat templates ------------------------------------------------------------------------------
@real
def test_smollm2_template_is_its_own_chatml(smol: backend.LlamaModel) -> None:
    template = ChatTemplate.from_model(smol)
    assert not template.is_fallback and "SmolLM" in (smol.chat_template or "")
    assert template.render([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    tokens = chat_tokens(smol, template, [{"role": "user", "content": "Hi"}])
    assert tokens[0] == 1 and tokens.count(2) == 2  # <|im_start|> first, two <|im_end|>
    rendered = b"".join(smol.token_bytes(t) for t in tokens).decode()
    assert rendered.endswith("<|im_start|>assistant\n")


@real
def test_gemma_base_has_no_template_so_fallback_with_note(gemma: backend.LlamaModel) -> None:
    template = ChatTemplate.from_model(gemma)
    assert gemma.chat_template is None and template.is_fallback
    assert "has no chat template; using ChatML fallback" in template.note
    tokens = chat_tokens(gemma, template, [{"role": "user", "content": "Hi"}])
    assert tokens[0] == gemma.bos_token and tokens[1] != gemma.bos_token


# --- vocabulary compatibility --------------------------------------------------------------------
@real
def test_requantized_copy_is_compatible(smol_path: Path, smol: backend.LlamaModel,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    copy = files.requantize(smol_path, tmp_path_factory.mktemp("q") / "smol-q8_0.gguf", "Q8_0")
    with backend.load_model(copy, n_ctx=256, n_threads=THREADS) as draft:
        assert compatibility_problems(smol.vocab_info(), draft.vocab_info()) == []
        check_compatible(smol, draft)
        tokens = smol.tokenize(PROMPT)
        assert not np.array_equal(draft.eval(tokens, [-1]), smol.eval(tokens, [-1]))


@real
def test_gemma_cannot_draft_for_smollm2(smol: backend.LlamaModel,
                                        gemma: backend.LlamaModel) -> None:
    with pytest.raises(UsageError) as caught:
        check_compatible(smol, gemma)
    message = str(caught.value)
    assert message.startswith(f"draft {gemma.path.name} cannot draft for target "
                              f"{smol.path.name}: ")
    for part in ("tokenizer type bpe vs spm", "vocabulary size 49152 vs 262144",
                 "bos token 1 vs 2", "token texts differ"):
        assert part in message
    assert "\n" not in message


def test_unknown_quantization_type(tmp_path: Path) -> None:
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(UsageError, match="unknown quantization type 'Q9_9'"):
        files.requantize(gguf, tmp_path / "y.gguf", "Q9_9")


# --- loading errors and silence ------------------------------------------------------------------
def test_missing_file_and_non_gguf_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model file not found"):
        backend.load_model(tmp_path / "nope.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelError, match="is not a GGUF model file"):
        backend.load_model(text)


@real
def test_truncated_gguf_fails_quietly_with_llama_cpp_reason(
        smol_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.gguf"
    with smol_path.open("rb") as fh:
        broken.write_bytes(fh.read(1 << 20))
    with pytest.raises(ModelError) as caught:
        backend.load_model(broken, n_ctx=256, n_threads=THREADS)
    assert str(caught.value).startswith(f"llama.cpp could not load {broken}: ")
    assert "\n" not in str(caught.value)
    assert capfd.readouterr() == ("", "")


@real
def test_llama_cpp_is_silent_unless_verbose(smol_path: Path) -> None:
    script = (
        "import sys\n"
        "from specchat.llm.model import load_model\n"
        "with load_model(sys.argv[1], n_ctx=256, n_threads=1) as m:\n"
        "    m.eval(m.tokenize('Hello there'), [-1])\n"
        "sys.stderr.write('--verbose--\\n'); sys.stderr.flush()\n"
        "with load_model(sys.argv[1], n_ctx=256, n_threads=1, verbose=True) as m:\n"
        "    m.eval(m.tokenize('Hello there'), [-1])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script, str(smol_path)], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    quiet, _, verbose = done.stderr.partition("--verbose--\n")
    assert (done.stdout, quiet) == ("", "")
    assert "llama" in verbose  # the loader's own report, let through on request
