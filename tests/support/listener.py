"""A TCP listener that counts connections: the witness that nothing was fetched."""

from __future__ import annotations

import socket
import threading


class Listener:
    """A TCP listener on 127.0.0.1 that counts connections (and closes each at once)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.sock.close()
