"""Real TCP on 127.0.0.1 for the toxiproxy tests: an upstream server and socket helpers."""

from __future__ import annotations

import socket
import threading
import time

IO_TIMEOUT = 10.0


class Upstream:
    """A threaded TCP server: sends ``greeting`` on accept, then echoes (``mode="echo"``),
    only reads (``"sink"``) or closes right away (``"close"``). Records what each connection
    sent it."""

    def __init__(self, greeting: bytes = b"", mode: str = "echo"):
        self.greeting = greeting
        self.mode = mode
        self.received: list[bytearray] = []
        self._lock = threading.Condition()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            buf = bytearray()
            with self._lock:
                self.received.append(buf)
                self._conns.append(conn)
                self._lock.notify_all()
            threading.Thread(target=self._serve, args=(conn, buf), daemon=True).start()

    def _serve(self, conn: socket.socket, buf: bytearray) -> None:
        try:
            if self.greeting:
                conn.sendall(self.greeting)
            if self.mode == "close":
                return
            while data := conn.recv(65536):
                with self._lock:
                    buf += data
                    self._lock.notify_all()
                if self.mode == "echo":
                    conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def wait_received(self, index: int, nbytes: int, timeout: float = IO_TIMEOUT) -> bytes:
        """Wait until connection ``index`` has sent ``nbytes`` bytes (or the deadline)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.received) <= index or len(self.received[index]) < nbytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            return bytes(self.received[index]) if len(self.received) > index else b""

    def close(self) -> None:
        self._sock.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.close()
                except OSError:
                    pass


def connect(address: str, timeout: float = IO_TIMEOUT) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly ``n`` bytes, or fewer if the peer closes first."""
    out = bytearray()
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            break
        out += data
    return bytes(out)


def recv_to_eof(sock: socket.socket) -> bytes:
    out = bytearray()
    while data := sock.recv(65536):
        out += data
    return bytes(out)
