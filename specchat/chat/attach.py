"""Files in the prompt: reading them safely and fencing them into the user's message.

A file goes into the message as a label line with its name and a fence made of more
backticks than any run inside the file, so nothing in the file can close the fence early.
The text is data: it is tokenized like any user text (never parsed for special tokens).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specchat import fileio, fileread
from specchat.errors import UsageError

# A sanity cap checked before reading: far beyond any context specchat can load, so the real
# limit is the token count, checked once the model is loaded.
MAX_BYTES = 16 * 1024 * 1024
STDIN = "-"


@dataclass(frozen=True)
class Attachment:
    """One file's name (as the user gave it) and its text."""

    name: str
    text: str

    def block(self) -> str:
        fence = fence_for(self.text)
        body = self.text if self.text.endswith("\n") or not self.text else self.text + "\n"
        return f"File: {self.name}\n{fence}\n{body}{fence}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "text": self.text}

    @classmethod
    def from_dict(cls, data: Any) -> Attachment | None:
        if not isinstance(data, dict):
            return None
        return cls(name=str(data.get("name", "?")), text=str(data.get("text", "")))


def fence_for(text: str) -> str:
    """Backticks, one more than the longest run in `text` (at least three)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def compose(attachments: Sequence[Attachment], prompt: str) -> str:
    """The user message the model sees: every file's block, then the prompt."""
    parts = [a.block() for a in attachments]
    if prompt:
        parts.append(prompt)
    return "\n\n".join(parts)


def read_attachment(name: str, stdin: BinaryIO | None = None) -> Attachment:
    """Read one file (or stdin for "-"); a problem is a one-line usage error naming it."""
    if name == STDIN:
        if stdin is None:
            raise UsageError("-f -: stdin is a terminal, not a file: pipe something in")
        return Attachment("stdin", _decode(stdin.read(MAX_BYTES + 1), "stdin"))
    path = Path(name).expanduser()
    if path.is_dir():
        raise UsageError(f"{name}: is a directory; attach files one by one")
    try:
        # Bounded, and never a device: `-f` on a link to /dev/zero is refused at once. Pipes
        # are taken (`-f <(git diff)`), up to the same limit.
        data = fileread.read_limited(path, MAX_BYTES, pipes=True)
    except FileNotFoundError:
        raise UsageError(f"{name}: no such file") from None
    except fileio.FileIOError as exc:
        raise UsageError(f"{name}: {exc.reason}; attach a text file or a pipe") from None
    return Attachment(name, _decode(data, name))


def _decode(data: bytes, name: str) -> str:
    if len(data) > MAX_BYTES:
        raise UsageError(f"{name}: too large to attach (at most "
                         f"{MAX_BYTES // (1024 * 1024)} MiB)")
    if b"\0" in data:
        raise UsageError(f"{name}: looks binary (it has NUL bytes); only text files can be "
                         "attached")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{name}: is not UTF-8 text; only text files can be attached") \
            from None


def token_count(attachment: Attachment, raw_tokens: Callable[[str], list[int]]) -> int:
    """Tokens the file's block adds to a message (as plain text, BOS not counted)."""
    return len(raw_tokens(attachment.block())) - len(raw_tokens(""))


def check_fits(attachment: Attachment, tokens: int, n_ctx: int) -> None:
    """Refuse a file that leaves no room in the context for a question and an answer."""
    if tokens >= n_ctx:
        raise UsageError(f"{attachment.name}: {tokens} tokens does not fit in a context of "
                         f"{n_ctx}: raise --ctx or attach a smaller file")


def read_files(names: Sequence[str]) -> list[Attachment]:
    """The files of -f/--file, in order; "-" is stdin (which can be read only once)."""
    if list(names).count(STDIN) > 1:
        raise UsageError("-f - can be given once: stdin is read once")
    stdin = None if sys.stdin.isatty() else sys.stdin.buffer
    return [read_attachment(name, stdin) for name in names]


def measure(attachments: Sequence[Attachment], raw_tokens: Callable[[str], list[int]],
            n_ctx: int) -> list[int]:
    """Each file's token count; a file too large for the context is a usage error."""
    counts = []
    for attachment in attachments:
        tokens = token_count(attachment, raw_tokens)
        check_fits(attachment, tokens, n_ctx)
        counts.append(tokens)
    return counts
