"""The store RPC server: one thread per connection, handshake first, then requests.

It listens for the whole life of the master process; while this master is not the serving
leader every request answers NOT_LEADER with the leader's address, so clients fail fast.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.protocol import (
    ConnectionClosed,
    ProtocolError,
    recv_frame,
    send_frame,
)

log = logging.getLogger("reference_engine.master.rpc")

Handler = Callable[[str, dict[str, Any], "Connection"], Any]
Hello = Callable[[dict[str, Any], "Connection"], dict[str, Any]]


class Connection:
    def __init__(self, sock: socket.socket, peer: str):
        self.sock = sock
        self.peer = peer
        self.client_version = ""
        self.client_id = ""


class RpcServer:
    def __init__(self, host: str, port: int, hello: Hello, handler: Handler):
        self.hello = hello
        self.handler = handler
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._sock.settimeout(0.5)
        host_, port_ = self._sock.getsockname()[:2]
        self.address = f"{host_}:{port_}"
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="rpc-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            for c in list(self._conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(timeout=2)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(sock)
            threading.Thread(target=self._serve, args=(sock, f"{addr[0]}:{addr[1]}"),
                             name="rpc-conn", daemon=True).start()

    def _serve(self, sock: socket.socket, peer: str) -> None:
        conn = Connection(sock, peer)
        try:
            first = recv_frame(sock)
            if first.get("op") != "hello":
                send_frame(sock, _error(None, MasterError(ErrorCode.INVALID_RPC_ARGUMENTS,
                                                          "first frame must be hello")))
                return
            try:
                result = self.hello(first, conn)
            except MasterError as exc:
                send_frame(sock, _error(None, exc))
                return
            send_frame(sock, {"ok": True, "result": result})
            while not self._stop.is_set():
                msg = recv_frame(sock)
                rid = msg.get("id")
                op = msg.get("op")
                args = msg.get("args") or {}
                if not isinstance(op, str) or not isinstance(args, dict):
                    send_frame(sock, _error(rid, MasterError(ErrorCode.INVALID_RPC_ARGUMENTS,
                                                             "op must be a string, args an object")))
                    continue
                try:
                    result = self.handler(op, args, conn)
                    send_frame(sock, {"id": rid, "ok": True, "result": result})
                except MasterError as exc:
                    send_frame(sock, _error(rid, exc))
                except (TypeError, ValueError, KeyError) as exc:
                    send_frame(sock, _error(rid, MasterError(ErrorCode.INVALID_PARAMS,
                                                             f"{op}: {exc}")))
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionClosed, OSError):
            pass
        except Exception:  # noqa: BLE001
            log.exception("RPC connection from %s failed", peer)
        finally:
            with self._lock:
                self._conns.discard(sock)
            try:
                sock.close()
            except OSError:
                pass


def _error(rid: Any, exc: MasterError) -> dict[str, Any]:
    return {"id": rid, "ok": False, "error": exc.code.value, "message": exc.message}
