"""Connections: how many, how slow, and what the log says when there are too many.

uvicorn gives a client as long as it likes to send its request headers, and accepts
connections until the process runs out of file descriptors; asyncio then logs a traceback
for every failed accept(), retried at once up to the listen backlog each time (141 MB of log
in 25 s). Here:

- a connection beyond --max-connections (lowered to what `ulimit -n` leaves) is answered 503
  and closed at once, so its descriptor is free again;
- a connection that has not sent a request's headers within --read-timeout (from connecting,
  or from the end of its previous response) is answered 408 and closed;
- a resource error (out of descriptors, memory) is one line per NOTICE_INTERVAL_S, never a
  traceback; other event-loop errors are one line each, also at most once per interval.
"""

from __future__ import annotations

import asyncio
import errno
import json
import sys
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

NOTICE_INTERVAL_S = 10.0
FD_RESERVE = 32  # descriptors kept for the model files, the log, pipes and the listener
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Notices:
    """Lines on stderr, each kind at most once per interval (with how many were held back)."""

    def __init__(self, interval: float = NOTICE_INTERVAL_S) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def say(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -self.interval) < self.interval:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        more = f" ({held} more like it since the last such line)" if held else ""
        print(f"specchat: {message}{more}", file=sys.stderr, flush=True)


NOTICES = Notices()


def effective_max_connections(wanted: int) -> tuple[int, str | None]:
    """--max-connections, lowered to what the open-file limit leaves; and a note if it was."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return wanted, None
    if soft == resource.RLIM_INFINITY or soft - FD_RESERVE >= wanted:
        return wanted, None
    fitted = max(1, soft - FD_RESERVE)
    return fitted, (f"note: the open-file limit (ulimit -n {soft}) leaves room for {fitted} "
                    f"connections; --max-connections {wanted} is lowered to that")


def loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's exception handler: one line, never a traceback."""
    exc = context.get("exception")
    message = context.get("message") or "event loop error"
    if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS:
        NOTICES.say("resources", f"error: cannot accept connections: {exc.strerror} "
                    f"(lower --max-connections or raise `ulimit -n`); retrying")
        return
    detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    NOTICES.say(f"loop:{message}", f"error: {message}{detail}")


def _response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "server_error",
                                 "param": None, "code": code}}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nretry-after: 1\r\n\r\n"
            ).encode() + body


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a deadline for request headers
    (guarded_protocol() sets the two numbers)."""

    max_connections = 64
    header_timeout = 20.0
    _header_timer: asyncio.TimerHandle | None = None
    _heard = False  # bytes of a request arrived since the timer was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            NOTICES.say("busy", f"warning: {self.max_connections} connections are open "
                        "(--max-connections): refusing more until some close")
            transport.write(_response(503, "Service Unavailable", "too_many_connections",
                                      "the server has too many open connections; retry in a "
                                      "moment"))
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._heard = True
        super().data_received(data)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not before:
            self._disarm()  # a request's headers are all in

    def on_response_complete(self) -> None:
        self._arm()  # before super(): it may start a pipelined request, which disarms
        super().on_response_complete()
        if self.transport.is_closing():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._heard = False
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._heard:  # half a request: say why; a silent connection is just closed
            limit = f"{self.header_timeout:g} s"
            NOTICES.say("slow", f"warning: closed a connection that sent no complete request "
                        f"within {limit} (--read-timeout)")
            self.transport.write(_response(408, "Request Timeout", "request_timeout",
                                           f"no complete request within {limit}"))
        self.transport.close()


def guarded_protocol(max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """GuardedH11 with these limits, as the protocol class uvicorn instantiates."""
    return type("Guarded", (GuardedH11,), {"max_connections": max_connections,
                                           "header_timeout": header_timeout})
