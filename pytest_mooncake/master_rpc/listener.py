"""A loopback TCP listener that gives each accepted connection its own thread and closes
every connection it handed out when it closes (the recording relay, the coro_rpc gateway)."""

from __future__ import annotations

import socket
import threading


class ConnectionListener:
    """Subclasses define ``handle(sock)``; ``with Sub(...) as listener: listener.address``."""

    def __init__(self, host: str = "127.0.0.1"):
        self._listener = socket.create_server((host, 0))
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def handle(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def track(self, sock: socket.socket) -> socket.socket:
        """Close ``sock`` with the listener."""
        with self._lock:
            self._sockets.append(sock)
        return sock

    def spawn(self, fn, *args) -> None:
        threading.Thread(target=fn, args=args, daemon=True,
                         name=f"{type(self).__name__}-{self.address}").start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self.spawn(self.handle, self.track(sock))

    def __enter__(self):
        self.spawn(self._accept)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.close()
                except OSError:
                    pass
