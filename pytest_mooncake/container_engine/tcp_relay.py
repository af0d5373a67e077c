"""A TCP relay between this host's loopback and the run's container network.

The fault proxy (Toxiproxy) listens on 127.0.0.1 and proxies only to loopback upstreams; a
container reaches neither. So each direction gets a relay: from this host's end of the session
network (its ``.1``, in 198.18.0.0/15) to a proxy on loopback, and from loopback to a service in
a container (etcd, the HTTP metadata server). A relay copies bytes both ways; when either side
closes or resets it closes the other, so a proxy that cuts, refuses or slows a connection does
the same to the container behind it.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, listen_host: str, target: tuple[str, int]):
        self.target = target
        self._listener = socket.create_server((listen_host, 0))
        self.address = f"{listen_host}:{self._listener.getsockname()[1]}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"relay {self.address}").start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            try:
                outbound = socket.create_connection(self.target, timeout=5)
                outbound.settimeout(None)
            except OSError:
                inbound.close()  # the proxy refused: so does the relay
                continue
            with self._lock:
                if self._closed:
                    inbound.close()
                    outbound.close()
                    return
                self._open.update((inbound, outbound))
            for src, dst in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            with self._lock:
                self._open.discard(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._open)
            self._open.clear()
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
