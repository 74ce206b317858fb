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


# --- stop strings ----------------------------------------------------------------------------

def reference_push(held: str, new: str, stops: tuple[str, ...]) -> tuple[str, str, bool]:
    """The plain definition, one find per stop string: (released, held, stopped)."""
    pending = held + new
    found = [i for i in (pending.find(s) for s in stops) if i >= 0]
    if found:
        return pending[:min(found)], "", True
    hold = max((n for s in stops for n in range(1, len(s)) if pending.endswith(s[:n])),
               default=0)
    return pending[:len(pending) - hold], pending[len(pending) - hold:], False


@pytest.mark.parametrize("seed", range(40))
def test_stops_are_found_and_held_back_as_their_plain_definition_says(seed: int) -> None:
    import random

    rng = random.Random(seed)
    stops = tuple({"".join(rng.choices("abc", k=rng.randint(1, 5)))
                   for _ in range(rng.randint(1, 8))})
    pieces = ["".join(rng.choices("abcd", k=rng.randint(0, 4))) for _ in range(30)]
    stream, held, stopped = TextStream(stops), "", False
    for piece in pieces:
        got = stream.push(piece.encode())
        want, held, stopped = reference_push(held, piece, stops)
        assert got == want
        assert stream.stopped == stopped
        if stopped:
            break


def test_the_earliest_starting_stop_wins_when_two_end_in_one_token() -> None:
    stream = TextStream(("abcd", "bc"))
    assert stream.push(b"xa") == "x"
    assert stream.push(b"bcd") == ""  # "abcd" began before "bc": the cut is at "a"
    assert stream.stopped and stream.text == "x"


def test_matching_work_per_token_does_not_grow_with_the_number_of_stops() -> None:
    """Moves of the matcher per character, counted: one stop string or 10,000 (two-character
    strings, as in a request that tried to slow the server down) cost the same."""
    text = ("the quick brown fox jumps over the lazy dog " * 20).encode()
    many = tuple(chr(0x4E00 + i // 100) + chr(0x4E00 + i % 100) for i in range(10_000))
    work = {}
    for name, stops in {"one": ("zz",), "many": many}.items():
        stream = TextStream(stops)
        per_token = []
        for i in range(0, len(text), 3):
            before = stream.stop_work
            stream.push(text[i:i + 3])
            per_token.append(stream.stop_work - before)
        work[name] = max(per_token)
    assert work["one"] <= 2 * 3 and work["many"] <= 2 * 3  # old: 10,000 finds a token


def test_matching_work_stays_within_twice_the_characters_read_on_overlapping_stops() -> None:
    """Stops built to make a matcher fall back far after each near miss ("aaa...ab")."""
    stops = tuple("a" * n + "b" for n in range(1, 200))
    stream = TextStream(stops)
    text = ("a" * 150 + "c") * 20
    for i in range(0, len(text), 2):
        stream.push(text[i:i + 2].encode())
    assert not stream.stopped
    assert stream.stop_work <= 2 * len(text)
