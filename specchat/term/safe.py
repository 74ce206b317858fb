"""Bytes from models, servers, hubs and files, made harmless before they reach a terminal.

A terminal obeys what it is sent: ESC ] 52 writes the clipboard, ESC ] 0 sets the window
title, ESC [ 2 J clears the screen, a carriage return or a backspace hides what came before on
the line, bidirectional overrides reorder what is shown. Any of these can arrive in a model's
answer, a server's reply or error message, a saved conversation, a hub's file name or a file
name given to -f. So every piece of text that specchat did not write itself is passed through
`visible()` on its way to a terminal: newline and tab stay, every other control character is
shown instead of obeyed (ESC as ^[, DEL as ^?, C1 and format characters as <U+009B>).

Only terminals get this: text written to a pipe or a file stays byte for byte what it was
(`specchat ask ... > answer.txt` keeps the model's exact output). specchat's own escape codes
(colours, the live status line, the progress line) are written around the neutralised text,
never through it.
"""

from __future__ import annotations

import sys
from typing import TextIO

KEPT = frozenset("\n\t")
# Unicode format characters that reorder or hide text (bidi overrides and isolates, the
# marks), which a terminal with bidi support obeys: shown like the C1 controls.
_FORMAT = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _shown(code: int) -> str:
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ESC -> ^[, BEL -> ^G, CR -> ^M
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


# Lone surrogates (from a JSON "\ud800" or undecodable bytes) cannot be encoded for a
# terminal at all: writing one would fail the whole line, so they are shown too.
_TABLE = {code: _shown(code)
          for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), *_FORMAT, *range(0xD800, 0xE000))
          if chr(code) not in KEPT}


def visible(text: str) -> str:
    """`text` with every control character but newline and tab shown instead of obeyed."""
    return text.translate(_TABLE)


def is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or already closed
        return False


def for_stream(text: str, stream: TextIO | None) -> str:
    """`text` as it may be written to `stream`: neutralised for a terminal, exact otherwise."""
    return visible(text) if is_terminal(stream) else text


def note(text: str, stream: TextIO | None = None) -> None:
    """One line on stderr (a note, a warning, an error), neutralised for a terminal."""
    stream = sys.stderr if stream is None else stream
    print(for_stream(text, stream), file=stream, flush=True)
