"""Who may talk to the server, and how much: checked before any route sees a request.

A web page the user visits can send requests to a server on 127.0.0.1: a `text/plain` POST
needs no CORS preflight, and DNS rebinding gives a page of evil.example a Host header of
evil.example with our address behind it. So, in this order:

- Host must be an IP literal, localhost (or a name under .localhost), the --host name, or a
  name in --allow-host (rebinding needs a name the attacker controls); else 403.
- A request with an Origin header (browsers send it) is refused unless the origin is in
  --cors-origin (none by default); CORS preflights are answered only for those origins.
- A POST body must be `application/json` (what a page cannot send without a preflight);
  else 415.
- The body is at most --max-body bytes (413, without reading on when Content-Length says so)
  and must arrive within --read-timeout seconds (408).

Every refusal is an OpenAI-shaped error with a message that says which option allows it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LOCAL_NAMES = ("localhost",)
_PREFLIGHT_HEADERS = "authorization, content-type"
_HEADER_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")


@dataclass(frozen=True)
class Policy:
    """What the guard lets through (from the SERVER options)."""

    bound_host: str = "127.0.0.1"
    allow_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body: int = 8 << 20
    read_timeout: float = 20.0

    def host_ok(self, header: str | None) -> bool:
        if header is None:
            return True  # HTTP/1.0 without Host: no browser sends that
        name = _host_name(header)
        if name is None:
            return False
        if _is_ip(name) or name in _LOCAL_NAMES or name.endswith(".localhost"):
            return True
        for entry in (self.bound_host, *self.allow_hosts):
            allowed = entry.strip().lower().rstrip(".")
            if allowed == "*" or (allowed.startswith(".") and name.endswith(allowed)):
                return True
            if name == (_host_name(allowed) or allowed):  # an entry may carry a port
                return True
        return False

    def origin_ok(self, origin: str) -> bool:
        allowed = {o.rstrip("/").lower() for o in self.cors_origins}
        return "*" in allowed or origin.rstrip("/").lower() in allowed


def _host_name(header: str) -> str | None:
    """The name or address of a Host header without its port; None if malformed."""
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else None
    name, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if port and not port.isdigit():
        return None
    return (name or text).rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """ASGI middleware applying a Policy to every HTTP request."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _refuse(scope, send, *refusal)
            return
        origin = headers.get("origin")
        if origin is not None and scope["method"] == "OPTIONS" and \
                "access-control-request-method" in headers:
            await _preflight(send, origin, headers.get("access-control-request-headers", ""))
            return
        if scope["method"] == "POST":
            body = await self._body(scope, receive, send, headers)
            if body is None:
                return
            receive = _replay(body, receive)
        if origin is not None:
            send = _with_cors(send, origin)
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope, headers: dict[str, str]
                 ) -> tuple[int, str, str] | None:
        host = headers.get("host")
        if not self.policy.host_ok(host):
            return 403, "host_not_allowed", (
                f"requests for host {host!r} are refused (a DNS-rebinding guard): use the "
                f"server's address, or start it with --allow-host NAME for a name you trust")
        origin = headers.get("origin")
        if origin is not None and not self.policy.origin_ok(origin):
            return 403, "origin_not_allowed", (
                f"requests from web pages are refused (Origin {origin!r}): start the server "
                "with --cors-origin ORIGIN for a page you trust")
        if scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return 415, "unsupported_media_type", (
                    f"the body must be JSON sent as Content-Type: application/json, not "
                    f"{kind or 'no type'!r} (curl: -H 'Content-Type: application/json')")
            length = headers.get("content-length", "")
            if length.isdigit() and int(length) > self.policy.max_body:
                return 413, "request_too_large", _too_large(int(length), self.policy.max_body)
        return None

    async def _body(self, scope: Scope, receive: Receive, send: Send,
                    headers: dict[str, str]) -> bytes | None:
        """The whole body, or None once a refusal was sent (too big, too slow, gone)."""
        parts: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.policy.read_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                await _refuse(scope, send, 408, "request_timeout",
                              f"the request body did not arrive within "
                              f"{self.policy.read_timeout:g} s (--read-timeout)")
                return None
            if message["type"] == "http.disconnect":
                return None
            part = message.get("body", b"")
            size += len(part)
            if size > self.policy.max_body:
                await _refuse(scope, send, 413, "request_too_large",
                              _too_large(None, self.policy.max_body))
                return None
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)


def _too_large(size: int | None, limit: int) -> str:
    said = f"{size} bytes" if size is not None else "larger than that"
    return (f"the request body is {said}; this server takes at most {limit} bytes "
            "(--max-body): send a shorter conversation")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body, already read, once; then whatever the connection says (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def _with_cors(send: Send, origin: str) -> Send:
    async def add(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []),
                                  (b"access-control-allow-origin", origin.encode("latin-1")),
                                  (b"vary", b"Origin")]
        await send(message)
    return add


async def _preflight(send: Send, origin: str, wanted: str) -> None:
    # The origin is one the user listed: the headers its client asks for (OpenAI's JS client
    # adds x-stainless-* ones) are allowed, as long as they are plain header names.
    names = [n.strip().lower() for n in wanted.split(",") if n.strip()]
    allowed = ", ".join(n for n in names if _HEADER_NAME.fullmatch(n)) or _PREFLIGHT_HEADERS
    headers = [(b"access-control-allow-origin", origin.encode("latin-1")),
               (b"access-control-allow-methods", b"GET, POST"),
               (b"access-control-allow-headers", allowed.encode("latin-1")),
               (b"access-control-max-age", b"600"), (b"vary", b"Origin"),
               (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _refuse(scope: Scope, send: Send, status: int, code: str, message: str) -> None:
    scope.setdefault("state", {})["error"] = message
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status in (408, 413):
        headers.append((b"connection", b"close"))  # the rest of the body is never read
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
