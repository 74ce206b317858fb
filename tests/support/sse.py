"""Reading a server-sent-events body the way a streaming client does."""

from __future__ import annotations

import json
from typing import Any


def sse(response: Any) -> list[Any]:
    """The data payloads of a server-sent-events body, JSON-decoded except [DONE]."""
    out = []
    for line in response.text.split("\n\n"):
        if line.strip():
            assert line.startswith("data: "), line
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
