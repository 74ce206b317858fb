"""Incremental detokenization never prints half a character (pure, no model needed)."""

from __future__ import annotations

import pytest

from specchat.llm.text import StreamDecoder, decode_pieces, stream_text

TEXT = "café 日本語 👋🏽 naïve Ωmega"


def byte_pieces(text: str, size: int) -> list[bytes]:
    data = text.encode("utf-8")
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_stream_never_emits_broken_characters(size: int) -> None:
    pieces = byte_pieces(TEXT, size)
    chunks = stream_text(range(len(pieces)), lambda t: pieces[t])
    assert "".join(chunks) == TEXT
    assert all("\ufffd" not in chunk for chunk in chunks)


def test_held_back_until_complete() -> None:
    emoji = "👋".encode()  # four bytes
    decoder = StreamDecoder(lambda t: emoji[t:t + 1])
    assert [decoder.add(i) for i in range(3)] == ["", "", ""]
    assert decoder.pending
    assert decoder.add(3) == "👋"
    assert not decoder.pending
    assert decoder.flush() == ""


def test_incomplete_tail_becomes_one_replacement_at_flush() -> None:
    decoder = StreamDecoder(lambda t: b"")
    assert decoder.add_bytes(b"ok \xe6\x97") == "ok "
    assert decoder.flush() == "\ufffd"


def test_garbage_bytes_do_not_raise() -> None:
    decoder = StreamDecoder(lambda t: b"")
    assert decoder.add_bytes(b"\xff") == "\ufffd"
    assert decoder.add_bytes(b"a") == "a"


def test_reset_drops_pending_bytes() -> None:
    decoder = StreamDecoder(lambda t: b"")
    decoder.add_bytes("日".encode()[:2])
    decoder.reset()
    assert not decoder.pending
    assert decoder.add_bytes(b"x") == "x"


def test_decode_pieces_joins_before_decoding() -> None:
    assert decode_pieces(byte_pieces(TEXT, 1)) == TEXT
