"""Running the app on uvicorn: bind first, load the models behind it, stop cleanly.

The socket is bound before the models load, so /health answers 503 while they do. Ctrl-C or
SIGTERM stops accepting requests, cuts short the answer in flight (its stream ends with an
OpenAI error event), frees the models and exits 130 (Ctrl-C) or 0 (SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Generator
from types import FrameType

import uvicorn

from specchat.backend.base import Backend
from specchat.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUNTIME, UsageError
from specchat.serve.app import ServeConfig, create_app
from specchat.serve.limits import effective_max_connections, guarded_protocol, loop_errors
from specchat.serve.worker import Worker


class _Server(uvicorn.Server):
    """uvicorn, but a signal ends `run` quietly instead of being raised again afterwards."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_signal = on_signal
        self.signals: list[int] = []
        self.failed = False

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        # Event-loop errors (a failed accept() when descriptors run out) as rate-limited
        # lines: asyncio's default handler prints a traceback for each, thousands a second.
        asyncio.get_running_loop().set_exception_handler(loop_errors)
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for connections
        self.should_exit = True
        self.on_signal()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or a usage error saying what to change."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: not an address this machine has ({exc.strerror})"
                         ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another "
                         "--port (or stop what uses it)") from None
    sock.set_inheritable(True)
    return sock


def run(load: Callable[[], Backend], config: ServeConfig, *, host: str, port: int,
        queue_size: int, verbose: bool = False, max_connections: int = 64) -> int:
    """Serve until a signal; returns the exit code."""
    sock = bind(host, port)
    cap, note = effective_max_connections(max_connections)
    if note:
        print(f"specchat: {note}", file=sys.stderr)
    actual = sock.getsockname()[1]
    server: _Server | None = None

    def failed(message: str) -> None:
        print(f"specchat: error: {message}", file=sys.stderr, flush=True)
        if server is not None:
            server.failed = True
            server.should_exit = True

    def loaded() -> Backend:
        runtime = load()
        print(f"specchat: ready: {config.model} at http://{_shown(host)}:{actual}/v1 "
              "(Ctrl-C stops)", file=sys.stderr, flush=True)
        return runtime

    worker = Worker(loaded, queue_size, on_fail=failed)
    app = create_app(worker, config)
    # uvicorn's own logger would print tracebacks; specchat prints one line per problem.
    logging.getLogger("uvicorn.error").setLevel(logging.INFO if verbose else logging.CRITICAL)
    # Plain asyncio and h11 wherever this runs (uvloop or httptools may be installed): the
    # connection limits below are written against them.
    uv_config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                               timeout_graceful_shutdown=10, server_header=False,
                               loop="asyncio", backlog=128,
                               http=guarded_protocol(cap, config.guard.read_timeout))
    server = _Server(uv_config, on_signal=worker.cancel_all)
    print(f"specchat: listening on http://{_shown(host)}:{actual} (loading {config.model}; "
          "/health says 503 until it is ready)", file=sys.stderr, flush=True)
    worker.start()
    try:
        server.run(sockets=[sock])
    finally:
        worker.stop()
        sock.close()
    if server.failed:
        return EXIT_RUNTIME
    if signal.SIGINT in server.signals:
        print("specchat: stopped (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print("specchat: stopped", file=sys.stderr)
    return EXIT_OK


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host
