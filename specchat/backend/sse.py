"""Server-sent events as a remote server sends them, read as untrusted bytes.

The openai client's own stream reader keeps a line in memory however long it grows (a 200 MB
line took 905 MB), passes a malformed event on as a JSONDecodeError, and ends quietly when the
connection is cut. Here every line is bounded, every event is a JSON object or a one-line
error naming the server, an `error` event is the server's message, and how the stream ended
(`[DONE]`, or the connection closing) is reported to the caller, which decides whether the
answer was complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from specchat.errors import SpecchatError

MAX_LINE_BYTES = 1 << 20  # an event of a streamed answer is a few hundred bytes
DONE = object()  # what events() yields for `data: [DONE]`


def events(chunks: Iterable[bytes], url: str, limit: int = MAX_LINE_BYTES) -> Iterator[Any]:
    """Each event's JSON object, then DONE if the server sent `data: [DONE]`; an event (and
    so a line) of more than `limit` bytes is an error."""
    data: list[bytes] = []
    size = 0
    for line in _lines(chunks, url, limit):
        if line:
            field, _, value = line.partition(b":")
            if field == b"data":
                data.append(value.removeprefix(b" "))
                size += len(line)
                if size > limit:
                    raise _too_long(url, limit)
            continue  # comments (":" lines, keep-alives) and other fields carry nothing here
        if not data:
            continue
        payload, data, size = b"\n".join(data), [], 0
        if payload.strip() == b"[DONE]":
            yield DONE
            return
        yield _decode(payload, url)
    if data:  # the last event had no blank line after it: the connection closed mid-event
        raise SpecchatError(f"the answer from {url} was cut off in the middle of an event")


def _lines(chunks: Iterable[bytes], url: str, limit: int) -> Iterator[bytes]:
    """Lines without their ending (LF or CRLF), each at most `limit` bytes."""
    pending = bytearray()
    for chunk in chunks:
        searched = len(pending)  # the bytes before hold no line end: search only the new ones
        pending += chunk
        while (end := pending.find(b"\n", searched)) >= 0:
            line = bytes(pending[:end]).removesuffix(b"\r")
            del pending[:end + 1]
            searched = 0
            yield line
        if len(pending) > limit:
            raise _too_long(url, limit)
    if pending:
        yield bytes(pending).removesuffix(b"\r")


def _too_long(url: str, limit: int) -> SpecchatError:
    return SpecchatError(f"{url} sent an event of more than {limit // 1024} KiB; stopped reading "
                         "(is --endpoint an OpenAI-compatible server?)")


def _decode(payload: bytes, url: str) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        shown = payload[:60].decode("utf-8", errors="replace")
        raise SpecchatError(f"{url} sent an event that is not JSON ({shown!r}); is --endpoint "
                            "an OpenAI-compatible server?") from None
    if not isinstance(value, dict):
        raise SpecchatError(f"{url} sent an event that is not a JSON object")
    error = value.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        raise SpecchatError(f"{url}: {str(message or 'the server reported an error')[:500]}")
    return value
