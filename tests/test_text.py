"""What the engine prints never holds half a character (engine/text.py; pure, no model)."""

from __future__ import annotations

import pytest

from specchat.engine.text import TextStream

TEXT = "café 日本語 👋🏽 naïve Ωmega"


def byte_pieces(text: str, size: int) -> list[bytes]:
    data = text.encode("utf-8")
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_stream_never_emits_broken_characters(size: int) -> None:
    stream = TextStream()
    chunks = [stream.push(piece) for piece in byte_pieces(TEXT, size)] + [stream.flush()]
    assert "".join(chunks) == TEXT == stream.text
    assert all("\ufffd" not in chunk for chunk in chunks)


def test_held_back_until_complete() -> None:
    emoji = "👋".encode()  # four bytes
    stream = TextStream()
    assert [stream.push(emoji[i:i + 1]) for i in range(3)] == ["", "", ""]
    assert stream.push(emoji[3:]) == "👋"
    assert stream.flush() == ""


def test_incomplete_tail_becomes_one_replacement_at_flush() -> None:
    stream = TextStream()
    assert stream.push(b"ok \xe6\x97") == "ok "
    assert stream.flush() == "\ufffd"


def test_garbage_bytes_do_not_raise() -> None:
    stream = TextStream()
    assert stream.push(b"\xff") == "\ufffd"
    assert stream.push(b"a") == "a"
