"""Serving many peers with few threads: accept, park idle connections, hand busy ones a thread.

Why: with a thread (and its buffers) per connection, idle or slow peers pin threads and memory
without bound, and a full table of them locks good clients out. Here an idle connection costs a
file descriptor and a selector entry. One selector thread accepts and watches the parked
connections; when one becomes readable it gets a thread of its own, which runs the protocol's
session until the peer goes quiet (``Session.serve`` returns True: park it again) or the session
ends (False: close it).

Limits (``Limits``; each server exposes them as command-line flags):

- ``recv_timeout``: a connection that receives nothing for this long is closed, whether it is
  idle between requests (parked) or stalled mid-request (the session's blocking receive times
  out: sockets get ``SO_RCVTIMEO``). A header announcing a body that never comes is dropped here.
- ``max_connections``: at the limit, the longest-idle parked connection is closed to admit the
  new peer (as nginx reuses idle keep-alive connections when it runs out); when every connection
  is busy the new peer is refused (closed at once, logged at most once a second).

Defaults follow production servers of the same kind: the binary ports (engine data and control,
master RPC) Kafka's ``connections.max.idle.ms`` (10 minutes) and memcached's connection limit
(1024); the HTTP ports nginx's ``client_header_timeout``/``client_body_timeout`` (60 s) and
``worker_connections`` (512).
"""

from __future__ import annotations

import argparse
import collections
import logging
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

log = logging.getLogger("reference_engine.hub")

LINGER = 0.5
"""Seconds a session waits for the next request on its thread before the connection is parked
(a busy peer keeps its thread; a quiet one gives it back)."""
SEND_TIMEOUT = 60.0
"""A peer that stops reading our replies holds a thread at most this long (nginx send_timeout)."""
LINGERING_TIME = 30.0
LINGERING_TIMEOUT = 5.0
"""``linger_close``: read and discard what the peer still sends for at most 30 s, and at most
5 s between reads (nginx lingering_time / lingering_timeout)."""


@dataclass(frozen=True)
class Limits:
    recv_timeout: float
    """Seconds a connection may receive nothing (idle, or stalled mid-request)."""
    max_connections: int
    """Open connections at most; at the limit the longest-idle one makes room."""
    linger: float = LINGER
    origin: tuple[str, str] = field(default=("", ""), compare=False)
    """Where the default values come from (for --help)."""


BINARY_LIMITS = Limits(600.0, 1024,
                       origin=("Kafka's connections.max.idle.ms", "memcached's -c"))
"""Engine data and control ports, master RPC."""
HTTP_LIMITS = Limits(60.0, 512, origin=("nginx's client_header_timeout/client_body_timeout",
                                        "nginx's worker_connections"))
"""Master admin and metadata HTTP."""


class Session(Protocol):
    idle_since: float
    """``time.monotonic()`` when the peer last had something to say (set by the session before
    it waits for the next request): which connection has been idle longest."""

    def serve(self) -> bool:
        """Serve requests until the peer goes quiet (True: park the connection) or the session
        ends (False: close it). Runs on a thread of its own; may raise OSError."""
        ...

    def closed(self) -> None:
        """The connection is gone (closed by either side or by the hub); called once."""
        ...


OpenSession = Callable[[socket.socket, tuple], Session]


@dataclass
class HubStats:
    accepted: int = 0
    refused: int = 0
    """Peers turned away because every connection was busy."""
    evicted: int = 0
    """Idle connections closed to make room for a new peer."""
    idle_closed: int = 0
    """Idle connections closed at the receive deadline."""
    open: int = 0
    active: int = 0
    """Connections being served on a thread right now (the others are parked)."""


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: tuple
    session: Session | None = None
    idle_since: float = 0.0
    closed: bool = field(default=False)


def readable_within(sock: socket.socket, seconds: float) -> bool:
    """True once ``sock`` has bytes (or EOF) to read, False if ``seconds`` pass first."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(max(0, int(seconds * 1000))))


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int((seconds % 1) * 1_000_000))


def linger_close(sock: socket.socket, total: float = LINGERING_TIME,
                 between: float = LINGERING_TIMEOUT) -> None:
    """Stop sending, then read and discard what the peer still sends (bounded in time) before
    closing: a peer that writes a whole request before reading gets the reply already sent,
    instead of a reset that destroys it."""
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + total
        while (left := deadline - time.monotonic()) > 0:
            if not readable_within(sock, min(left, between)):
                return
            if not sock.recv(65536, socket.MSG_DONTWAIT):
                return
    except OSError:
        return


class ConnectionHub:
    """Listens on ``host:port`` and serves each connection with ``open_session(sock, peer)``."""

    def __init__(self, name: str, host: str, port: int, limits: Limits,
                 open_session: OpenSession, *, send_timeout: float = SEND_TIMEOUT,
                 backlog: int = 128) -> None:
        if limits.recv_timeout <= 0 or limits.max_connections < 1:
            raise ValueError(f"{name}: receive timeout must be > 0 and max connections >= 1, "
                             f"not {limits.recv_timeout} and {limits.max_connections}")
        self.name = name
        self.limits = limits
        self._open_session = open_session
        self._send_timeout = send_timeout
        self._bind = (host, port)
        self._backlog = backlog
        self._lock = threading.Lock()
        self._open: set[_Conn] = set()
        self._parked: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._returned: collections.deque[_Conn] = collections.deque()
        self._workers: set[threading.Thread] = set()
        self._stats = HubStats()
        self._stopping = False
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r = self._wake_w = None
        self._last_limit_log = 0.0
        self._accept_paused_until = 0.0
        self.host, self.port = host, 0

    # ------------------------------------------------------------------ lifecycle

    def bind(self) -> int:
        """Bind and listen (peers queue in the backlog until ``start``); the port."""
        if self._listener is None:
            family = socket.AF_INET6 if ":" in self._bind[0] else socket.AF_INET
            lst = socket.create_server(self._bind, family=family, backlog=self._backlog)
            lst.setblocking(False)
            self._listener = lst
            self.host, self.port = lst.getsockname()[:2]
        return self.port

    def start(self) -> int:
        """Bind if not yet bound, and serve; the port."""
        if self._thread is not None:
            return self.port
        self.bind()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listener")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-hub", daemon=True)
        self._thread.start()
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every connection; wait (bounded) for the session threads."""
        if self._thread is None:
            if self._listener is not None:  # bound, never started
                self._listener.close()
                self._listener = None
            return
        with self._lock:
            self._stopping = True
        self._wake()
        self._thread.join(timeout)
        with self._lock:  # the hub thread closed the parked ones: what is left is being served
            active = list(self._open)
            workers = list(self._workers)
        for conn in active:  # unblock sessions waiting on their peer
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
        while self._returned:
            self._drop(self._returned.popleft())
        for s in (self._wake_r, self._wake_w):
            s.close()
        self._sel.close()
        self._listener = None
        self._thread = None

    def stats(self) -> HubStats:
        with self._lock:
            return replace(self._stats, open=len(self._open),
                           active=len(self._open) - len(self._parked))

    # ------------------------------------------------------------------ selector thread

    def _loop(self) -> None:
        sel = self._sel
        try:
            while not self._stopping:
                for key, _ in sel.select(self._next_timeout()):
                    if key.data == "listener":
                        self._accept_all()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._activate(key.data)
                self._park_returned()
                self._expire_idle()
                self._resume_accepting()
        except Exception:  # noqa: BLE001 (a bug here must not end serving silently)
            log.exception("%s: connection hub failed; no longer accepting", self.name)
        finally:
            try:
                sel.unregister(self._listener)
            except (KeyError, ValueError):
                pass
            self._listener.close()
            for conn in list(self._parked):
                self._unpark(conn)
                self._drop(conn)

    def _next_timeout(self) -> float | None:
        timeouts = []
        if self._parked:
            first = next(iter(self._parked))
            timeouts.append(first.idle_since + self.limits.recv_timeout - time.monotonic())
        if self._accept_paused_until:
            timeouts.append(self._accept_paused_until - time.monotonic())
        return max(0.0, min(timeouts)) if timeouts else None

    def _accept_all(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. out of file descriptors: pause accepting, keep serving
                log.warning("%s: accept failed: %s; pausing accepts for 50 ms", self.name, exc)
                self._sel.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + 0.05
                return
            self._admit(sock, peer)

    def _resume_accepting(self) -> None:
        if self._accept_paused_until and time.monotonic() >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ, "listener")

    def _admit(self, sock: socket.socket, peer: tuple) -> None:
        with self._lock:
            full = len(self._open) >= self.limits.max_connections
        if full and self._parked:
            oldest = min(self._parked, key=lambda c: c.idle_since)
            with self._lock:
                self._stats.evicted += 1
                evicted = self._stats.evicted
            self._log_at_limit("closing the idle connection of %s to admit %s (%d so far)",
                               _peer_text(oldest.peer), _peer_text(peer), evicted)
            self._unpark(oldest)
            self._drop(oldest)
        elif full:
            with self._lock:
                self._stats.refused += 1
                refused = self._stats.refused
            self._log_at_limit("refusing %s: every connection is busy (%d refused so far)",
                               _peer_text(peer), refused)
            sock.close()
            return
        try:
            sock.setblocking(True)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                            _timeval(self.limits.recv_timeout))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(self._send_timeout))
        except OSError:  # the peer is already gone
            sock.close()
            return
        conn = _Conn(sock, peer)
        with self._lock:
            self._open.add(conn)
            self._stats.accepted += 1
        self._park(conn)

    def _log_at_limit(self, msg: str, *args: object) -> None:
        now = time.monotonic()  # at most one line a second: a flood of peers must not flood logs
        if now - self._last_limit_log >= 1.0:
            self._last_limit_log = now
            log.warning("%s: at the limit of %d connections: " + msg, self.name,
                        self.limits.max_connections, *args)

    def _park(self, conn: _Conn) -> None:
        session_idle = getattr(conn.session, "idle_since", None)
        conn.idle_since = session_idle if session_idle is not None else time.monotonic()
        try:
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError, KeyError) as exc:  # closed under us: drop it, keep serving
            log.info("%s: cannot park the connection of %s: %s", self.name,
                     _peer_text(conn.peer), exc)
            self._drop(conn)
            return
        self._parked[conn] = None

    def _unpark(self, conn: _Conn) -> None:
        self._parked.pop(conn, None)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass

    def _activate(self, conn: _Conn) -> None:
        self._unpark(conn)
        t = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name=f"{self.name}-{_peer_text(conn.peer)}")
        with self._lock:
            self._workers.add(t)
        try:
            t.start()
        except RuntimeError as exc:  # no thread to be had: this peer goes, the others stay
            with self._lock:
                self._workers.discard(t)
            log.warning("%s: cannot serve %s: %s", self.name, _peer_text(conn.peer), exc)
            self._drop(conn)

    def _park_returned(self) -> None:
        while self._returned:
            conn = self._returned.popleft()
            if not conn.closed:
                self._park(conn)

    def _expire_idle(self) -> None:
        deadline = time.monotonic() - self.limits.recv_timeout
        while self._parked:
            conn = next(iter(self._parked))  # parked in about the order they went idle
            if conn.idle_since > deadline:
                return
            self._unpark(conn)
            self._drop(conn)
            with self._lock:
                self._stats.idle_closed += 1
            log.debug("%s: closed %s, idle for %gs", self.name, _peer_text(conn.peer),
                      self.limits.recv_timeout)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    # ------------------------------------------------------------------ session threads

    def _serve(self, conn: _Conn) -> None:
        keep = False
        try:
            if conn.session is None:
                conn.session = self._open_session(conn.sock, conn.peer)
            keep = conn.session.serve()
        except OSError as exc:
            if not self._stopping:
                log.info("%s: connection from %s closed: %s", self.name, _peer_text(conn.peer),
                         exc)
        except Exception:  # noqa: BLE001 (one peer's bug must not take the server down)
            log.exception("%s: session of %s failed", self.name, _peer_text(conn.peer))
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())
                requeue = keep and not self._stopping
                if requeue:
                    self._returned.append(conn)
            if requeue:
                self._wake()
            else:
                self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        with self._lock:
            if conn.closed:
                return
            conn.closed = True
            self._open.discard(conn)
        try:
            conn.sock.close()
        finally:
            if conn.session is not None:
                conn.session.closed()


def _peer_text(peer: tuple) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


# ---------------------------------------------------------------------- command-line flags


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def add_limit_flags(parser: argparse.ArgumentParser, prefix: str, port: str,
                    defaults: Limits) -> None:
    """``--{prefix}recv-timeout`` and ``--{prefix}max-connections`` for one listening port."""
    parser.add_argument(
        f"--{prefix}recv-timeout", type=_positive_float, default=defaults.recv_timeout,
        metavar="SECONDS",
        help=f"close a connection to the {port} that receives nothing for this long, idle or "
             f"mid-request (default {defaults.recv_timeout:g}, as {defaults.origin[0]})")
    parser.add_argument(
        f"--{prefix}max-connections", type=_positive_int, default=defaults.max_connections,
        metavar="N",
        help=f"connections to the {port} at most; at the limit the longest-idle one is closed to "
             f"admit a new peer, and when all are busy the new peer is refused "
             f"(default {defaults.max_connections}, as {defaults.origin[1]})")


def limits_from(args: argparse.Namespace, prefix: str) -> Limits:
    """The ``Limits`` parsed by ``add_limit_flags`` with the same ``prefix``."""
    key = prefix.replace("-", "_")
    return Limits(getattr(args, f"{key}recv_timeout"), getattr(args, f"{key}max_connections"))
