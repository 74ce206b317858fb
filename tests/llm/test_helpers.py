"""The pure parts of the llama.cpp backend: rows, chunks, buffers, file checks."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from specchat.errors import ModelError
from specchat.llm.batch import chunk_spans, normalize_rows, rows_in_span
from specchat.llm.cbuf import log_reason, read_negative_size, read_snprintf, read_tokens
from specchat.llm.context import start_size
from specchat.llm.gguf import check_gguf_file
from specchat.llm.hooks import LogSink


def test_rows_negative_and_out_of_range() -> None:
    assert normalize_rows([0, -1, 2, -3], 3) == [0, 2, 2, 0]
    assert normalize_rows([], 0) == []
    with pytest.raises(IndexError, match=r"\[3, -4\] outside a batch of 3"):
        normalize_rows([3, -4, 1], 3)
    with pytest.raises(IndexError):
        normalize_rows([0], 0)


def test_a_context_starts_at_what_is_wanted_rounded_up_within_a_batch_and_the_limit() -> None:
    assert start_size(4096, None, 512) == 4096  # nothing said: full size
    assert start_size(4096, 1100, 512) == 1280
    assert start_size(4096, 1280, 512) == 1280
    assert start_size(4096, 40, 512) == 512  # never fewer than one prefill batch
    assert start_size(4096, 9000, 512) == 4096
    assert start_size(300, 40, 300) == 300  # a --ctx below a batch: the batch follows it


def test_chunks_and_rows_inside_them() -> None:
    assert chunk_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_spans(0, 4) == []
    assert rows_in_span([9, 1, 5, 5], 4, 8) == [(2, 1), (3, 1)]


def test_buffer_readers_retry_with_the_size_asked_for() -> None:
    def negative(buf: ctypes.Array, size: int) -> int:
        data = b"a longer piece"
        if size < len(data):
            return -len(data)
        ctypes.memmove(buf, data, len(data))
        return len(data)

    def snprintf(buf: ctypes.Array, size: int) -> int:
        data = b"x" * 300
        ctypes.memmove(buf, data, min(size - 1, len(data)))
        return len(data)

    def tokens(arr: ctypes.Array, size: int) -> int:
        if size < 5:
            return -5
        arr[:5] = [1, 2, 3, 4, 5]
        return 5

    assert read_negative_size(negative, 2) == b"a longer piece"
    assert read_snprintf(snprintf, 16) == b"x" * 300
    assert read_snprintf(lambda buf, size: -1) == b""
    assert read_tokens(tokens, 1) == [1, 2, 3, 4, 5]


def test_gguf_file_checks(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model file not found"):
        check_gguf_file(tmp_path / "missing.gguf")
    with pytest.raises(ModelError, match="a folder"):
        check_gguf_file(tmp_path)
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04")
    with pytest.raises(ModelError, match="is not a GGUF model file"):
        check_gguf_file(tmp_path / "x.gguf")
    (tmp_path / "y.gguf").write_bytes(b"GGUF\x03\x00")
    check_gguf_file(tmp_path / "y.gguf")


def test_log_reason_is_the_first_cause_without_function_names() -> None:
    lines = ["\n", "gguf_init_from_reader: failed to read key-value pairs\n",
             "llama_model_load: error loading model: llama_model_loader: failed to load model\n"]
    assert log_reason(lines) == "failed to read key-value pairs"
    assert log_reason([]) == "no details (rerun with --verbose)"


def test_log_sink_is_quiet_keeps_errors_and_holds_ctrl_c(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    sink = LogSink()
    sink(2, b"info line\n", None)
    sink(LogSink.ERROR, b"load: bad file\n", None)
    sink(LogSink.CONT, b"more of it\n", None)
    assert list(sink.errors) == ["load: bad file\n", "more of it\n"]
    assert capsys.readouterr() == ("", "")
    sink.verbose = True
    sink(2, b"shown\n", None)
    assert capsys.readouterr().err == "shown\n"

    def interrupted_write(text: str) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("sys.stderr.write", interrupted_write)
    sink(2, b"x", None)  # must not raise inside a C callback
    monkeypatch.undo()
    with pytest.raises(KeyboardInterrupt):
        sink.raise_pending_interrupt()
    sink.raise_pending_interrupt()  # only once
