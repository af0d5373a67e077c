"""The store client library: finds the leader through etcd (or Redis: ``redis://host:port``), keeps a segment mounted, reattaches.

A maintenance thread pings the master every ``heartbeat_interval``; on NEED_REMOUNT it remounts
its segments; when the connection breaks or the master answers NOT_LEADER it detaches, asks the
reattach policy what to do (rfc: nothing; legacy: keep waiting on the old connection for the
stall), looks the leader up again in etcd and reattaches. The rfc policy also watches the leader
key (polling it every heartbeat) so a change of leader is noticed without a failed call.

Every call has a deadline: a call waits for an attached master at most ``reattach_timeout`` and
for one answer at most ``call_timeout``; nothing blocks forever.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.ha_backends import open_ha_backend
from reference_engine.master.ha_failures import is_ha_store_failure
from reference_engine.master.master_policies import ReattachPolicy
from reference_engine.master.model import SegmentInfo
from reference_engine.master.protocol import (
    MASTER_VERSION,
    ConnectionClosed,
    ProtocolError,
    recv_frame,
    send_frame,
)
from reference_engine.profiles import Profile, resolve_profile

log = logging.getLogger("reference_engine.master.client")


@dataclass
class Reattach:
    from_leader: str | None
    to_leader: str
    detached_at: float
    attached_at: float

    @property
    def seconds(self) -> float:
        return self.attached_at - self.detached_at


@dataclass
class ClientStats:
    reattaches: list[Reattach] = field(default_factory=list)
    failed_calls: int = 0
    remounts: int = 0
    last_error: str | None = None


class _Link:
    """One handshaken connection to a master."""

    def __init__(self, address: str, sock: socket.socket, hello: dict[str, Any]):
        self.address = address
        self.sock = sock
        self.hello = hello
        self.lock = threading.Lock()
        self.next_id = 1

    def call(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        with self.lock:
            rid = self.next_id
            self.next_id += 1
            self.sock.settimeout(timeout)
            send_frame(self.sock, {"id": rid, "op": op, "args": args})
            reply = recv_frame(self.sock)
        if reply.get("ok"):
            return reply.get("result")
        raise MasterError(_code(reply.get("error")), str(reply.get("message", "")))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _code(value: Any) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.INTERNAL_ERROR


_LINK_ERRORS = (OSError, ConnectionClosed, ProtocolError, TimeoutError)
_DETACH_CODES = (ErrorCode.NOT_LEADER,)


class StoreClient:
    def __init__(
        self,
        etcd: str | list[str],
        cluster_id: str,
        client_id: str | None = None,
        profile: str | Profile = "rfc",
        version: str = MASTER_VERSION,
        segment: SegmentInfo | None = None,
        reattach_timeout: float = 3.0,
        call_timeout: float = 2.0,
        heartbeat_interval: float = 0.2,
        stall_seconds: float = 121.0,
        etcd_timeout: float = 1.0,
        policy: ReattachPolicy | None = None,
    ):
        self.cluster_id = cluster_id
        self.client_id = client_id or f"client-{uuid.uuid4().hex[:8]}"
        self.version = version
        self.segments = [segment] if segment else []
        if segment is not None:
            segment.client_id = self.client_id
        self.reattach_timeout = reattach_timeout
        self.call_timeout = call_timeout
        self.heartbeat_interval = heartbeat_interval
        self.policy = policy or resolve_profile(profile).reattach_policy(stall_seconds)
        self.ha = open_ha_backend(etcd, timeout=etcd_timeout)
        self.stats = ClientStats()
        self._link: _Link | None = None
        self._refusal: str | None = None
        """Why the leader refused our handshake (an incompatible version), while it leads."""
        self._refused_by: str | None = None
        self._last_leader: str | None = None
        self._detached_at: float | None = None
        self._state = threading.Condition()
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._watcher: threading.Thread | None = None
        self._thread = threading.Thread(target=self._maintain, name=f"store-client-{self.client_id}",
                                        daemon=True)

    # ------------------------------------------------------------------ lifecycle

    def start(self, wait: float | None = None) -> StoreClient:
        """Start the maintenance thread; with ``wait``, block until attached (or raise)."""
        if self.policy.watch_leader:
            self._start_watch()
        self._thread.start()
        if wait is not None and not self.wait_attached(wait):
            raise MasterError(ErrorCode.TIMEOUT,
                              f"client {self.client_id}: no master attached within {wait:.1f}s "
                              f"({self.stats.last_error})")
        return self

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        for thread in (self._thread, self._watcher):
            if thread is not None and thread.is_alive():
                thread.join(timeout=5)
        with self._state:
            if self._link is not None:
                self._link.close()
                self._link = None
            self._state.notify_all()
        try:
            self.ha.close()
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def attached(self) -> bool:
        return self._link is not None

    @property
    def leader(self) -> str | None:
        link = self._link
        return link.address if link else None

    def wait_attached(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._state:
            while self._link is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed.is_set():
                    return False
                self._state.wait(left)
            return True

    # ------------------------------------------------------------------ store API

    def put(self, key: str, value: bytes | int, replica_num: int = 1) -> dict[str, Any]:
        size = value if isinstance(value, int) else len(value)
        self.call("put_start", {"key": key, "size": size, "replica_num": replica_num})
        try:
            return self.call("put_end", {"key": key})
        except MasterError as exc:
            if exc.code is ErrorCode.OBJECT_ALREADY_EXISTS:
                raise
            raise

    def get(self, key: str) -> dict[str, Any]:
        return self.call("get_replica_list", {"key": key})

    def exists(self, key: str) -> bool:
        return bool(self.call("exists", {"key": key})["exists"])

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        return self.call("remove", {"key": key, "force": force})

    def call(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """One request to the leader, retried across a reattach until ``reattach_timeout``."""
        args = dict(args or {})
        args.setdefault("client_id", self.client_id)
        deadline = time.monotonic() + self.reattach_timeout
        while True:
            link = self._wait_link(deadline)
            if link is None and self._refusal is not None:
                # refused, not absent: the refusal is the answer, at once (MP-8: loudly)
                self.stats.failed_calls += 1
                raise MasterError(ErrorCode.INVALID_VERSION,
                                  f"{op}: the leader refused this client: {self._refusal}")
            if link is None:
                self.stats.failed_calls += 1
                raise MasterError(ErrorCode.RPC_FAIL,
                                  f"{op}: no leader attached within {self.reattach_timeout:.1f}s "
                                  f"({self.stats.last_error})")
            try:
                return link.call(op, args, self.call_timeout)
            except MasterError as exc:
                if exc.code not in _DETACH_CODES:
                    raise
                self._detach(link, exc.message)
            except _LINK_ERRORS as exc:
                self._detach(link, f"{type(exc).__name__}: {exc}")
            if time.monotonic() >= deadline:
                self.stats.failed_calls += 1
                raise MasterError(ErrorCode.RPC_FAIL, f"{op}: {self.stats.last_error}")

    def _wait_link(self, deadline: float) -> _Link | None:
        with self._state:
            while (self._link is None and self._refusal is None
                   and not self._closed.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._state.wait(min(left, 0.05))
            return self._link

    # ------------------------------------------------------------------ maintenance

    def _maintain(self) -> None:
        while not self._closed.is_set():
            link = self._link
            if link is None:
                if not self._attach():
                    self._wake.wait(min(0.05, self.heartbeat_interval))
                    self._wake.clear()
                continue
            try:
                reply = link.call("ping", {"client_id": self.client_id}, self.call_timeout)
                if reply.get("client_status") == "NEED_REMOUNT":
                    self._remount(link)
            except MasterError as exc:
                if exc.code in _DETACH_CODES:
                    self._detach(link, exc.message)
            except _LINK_ERRORS as exc:
                self._detach(link, f"{type(exc).__name__}: {exc}")
            if self._link is None:
                self.policy.before_rediscovery(self._closed.wait)
                continue
            self._wake.wait(self.heartbeat_interval)
            self._wake.clear()

    def _detach(self, link: _Link, reason: str) -> None:
        with self._state:
            if self._link is link:
                self._link = None
                self._last_leader = link.address
                self._detached_at = time.time()
                self.stats.last_error = reason
                log.info("client %s detached from %s: %s", self.client_id, link.address, reason)
            self._state.notify_all()
        link.close()
        self._wake.set()

    def _attach(self) -> bool:
        try:
            address = self.ha.leader_address(self.cluster_id)
        except Exception as exc:  # noqa: BLE001
            if not is_ha_store_failure(exc):
                raise
            self.stats.last_error = f"{self.ha.name}: {type(exc).__name__}"
            return False
        if self._refused_by is not None and address != self._refused_by:
            with self._state:  # the leader that refused us is gone: wait for the next one
                self._refusal = self._refused_by = None
        if address is None:
            self.stats.last_error = f"no leader in {self.ha.name}"
            return False
        try:
            link = self._open(address)
            if self.segments:
                self._remount(link)
        except MasterError as exc:
            self.stats.last_error = f"{address}: {exc}"
            if exc.code is ErrorCode.INVALID_VERSION:
                log.error("client %s rejected by %s: %s", self.client_id, address, exc.message)
                with self._state:
                    self._refusal, self._refused_by = self.stats.last_error, address
                    self._state.notify_all()
            return False
        except _LINK_ERRORS as exc:
            self.stats.last_error = f"{address}: {type(exc).__name__}: {exc}"
            return False
        with self._state:
            self._link = link
            self._refusal = self._refused_by = None
            if self._detached_at is not None:
                self.stats.reattaches.append(
                    Reattach(self._last_leader, address, self._detached_at, time.time()))
                self._detached_at = None
            self._state.notify_all()
        log.info("client %s attached to %s", self.client_id, address)
        return True

    def _open(self, address: str) -> _Link:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=self.call_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.settimeout(self.call_timeout)
            send_frame(sock, {"op": "hello", "version": self.version, "client_id": self.client_id})
            reply = recv_frame(sock)
        except BaseException:
            sock.close()
            raise
        if not reply.get("ok"):
            sock.close()
            raise MasterError(_code(reply.get("error")), str(reply.get("message", "")))
        return _Link(address, sock, reply.get("result") or {})

    def _remount(self, link: _Link) -> None:
        if not self.segments:
            link.call("remount_segment", {"client_id": self.client_id, "segments": []},
                      self.call_timeout)
        else:
            link.call("remount_segment", {"client_id": self.client_id,
                                          "segments": [s.to_wire() for s in self.segments]},
                      self.call_timeout)
        self.stats.remounts += 1

    def _start_watch(self) -> None:
        self._watcher = threading.Thread(target=self._watch_leader, daemon=True,
                                         name=f"leader-watch-{self.client_id}")
        self._watcher.start()

    def _watch_leader(self) -> None:
        """Poll the leader key; a different leader than ours detaches us at once (a hung
        master would otherwise hold us until the call timeout)."""
        while not self._closed.wait(self.heartbeat_interval):
            link = self._link
            if link is None:
                continue
            try:
                address = self.ha.leader_address(self.cluster_id)
            except Exception as exc:  # noqa: BLE001
                if not is_ha_store_failure(exc):
                    raise
                continue
            if address is not None and address != link.address:
                self._detach(link, f"leader key now names {address}")
