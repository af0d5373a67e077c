"""The engine: one segment of our own memory, published, served, and a client of its peers.

Publishing (MR-18): the descriptor is built fresh from this process's own buffers and written
with a plain put; a predecessor's value is never read back or merged. On a clean stop the keys
are removed only if they still hold what this process wrote.

Transfers to a peer resolve it through the ``SegmentCache``. A transport failure retires the
peer's connections; under a profile with a retry budget (rfc) it then forces a refresh and
retries, at most ``retry_budget`` times (MR-12, MR-14). A changed ``instance_id`` retires the old
instance's connections before the new snapshot is used (MR-9 at the TCP level).

``stats()`` also reports the connections the process holds (MR-16: no endpoint leak):
``peer_connections`` (connections to peers' data ports not closed yet, wherever they are),
``peer_connections_stale`` (those of them to an endpoint no current snapshot publishes: a
replaced instance's) and ``data_sessions`` (connections accepted on our own data port, as the
kernel lists them). Absent where they cannot be observed.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference_engine.cache import COUNTERS, Counters, LookupFailed, SegmentCache
from reference_engine.descriptor import SegmentDescriptor, encode, tcp_descriptor
from reference_engine.engine.mapped_memory import Region, allocate, allocate_restartable
from reference_engine.engine.peer_locations import PeerLocationError, PeerLocations
from reference_engine.engine.sockets import LISTEN, own_tcp_sockets
from reference_engine.metadata import KeyLayout, MetadataStore
from reference_engine.profiles import Profile
from reference_engine.transport import TcpTransport, TransferError

log = logging.getLogger("reference_engine.engine")

ENGINE_COUNTERS = COUNTERS + ("endpoints_retired", "retries_exhausted", "transfer_retries",
                              "transfers_ok", "transfers_failed")


@dataclass(frozen=True)
class Outcome:
    """What one transfer did, in words a parent process can show."""

    ok: bool
    data: bytes | None = None
    error: str | None = None
    retries: int = 0


class Engine:
    def __init__(
        self,
        name: str,
        store: MetadataStore,
        profile: Profile,
        ttl_ms: float | None = None,
        buffer_size: int = 4 << 20,
        fixed_address: int | None = None,
        data_host: str = "127.0.0.1",
        data_port: int = 0,
        layout: KeyLayout | None = None,
        transport: Any = None,
    ):
        self.name = name
        self.store = store
        self.profile = profile
        self.layout = layout or KeyLayout.from_env()
        self.counters = Counters(ENGINE_COUNTERS)
        self.region: Region = (allocate(buffer_size, fixed_address) if fixed_address is not None
                               else allocate_restartable(buffer_size))
        self.transport = transport if transport is not None else TcpTransport(data_host, data_port)
        self.data_host = data_host
        self.locations = PeerLocations(store, self.layout)
        self.cache = SegmentCache(
            self._fetch, profile.engine.cache_policy(ttl_ms), profile.engine.replacement,
            counters=self.counters, on_replacement=self._retire_instance,
        )
        self.descriptor: SegmentDescriptor | None = None
        self._published: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._addressed: dict[tuple[str, int], str] = {}
        """(host, port) of every peer data endpoint transferred to -> the peer."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SegmentDescriptor:
        """Serve our buffer, then publish a fresh descriptor of it."""
        self.transport.register_buffer(self.region.addr, self.region.view)
        port = self.transport.start()
        desc = tcp_descriptor(self.name, [(self.region.addr, self.region.length)],
                              self.data_host, port, self.profile.identity.instance_id())
        self.descriptor = desc
        self.cache.set_local(desc)
        self._publish(self.layout.segment_key(self.name), encode(desc))
        rpc = {"ip_or_host_name": self.data_host, "rpc_port": port}
        try:
            self._publish(self.layout.rpc_meta_key(self.name), _compact(rpc), replace=True)
        except OSError as exc:  # not needed by the TCP transport; keep serving
            log.warning("could not publish rpc_meta of %s: %s", self.name, exc)
        log.info("segment %s published: instance %s, buffer [%#x, %#x), data port %d",
                 self.name, desc.instance_id or "(none: legacy)", self.region.addr,
                 self.region.addr + self.region.length, port)
        return desc

    def _publish(self, key: str, value: bytes, replace: bool = False) -> None:
        if replace:
            current = self.store.get(key)
            if current == value:  # Mooncake's Python server refuses even an identical re-put
                self._published[key] = value
                return
            if current is not None:
                self.store.delete(key)  # a predecessor's entry; the HTTP API refuses to replace it
        self.store.put(key, value)
        self._published[key] = value

    def stop(self) -> None:
        """Stop serving; remove our keys unless a successor already replaced them."""
        self.transport.stop()
        for key, value in self._published.items():
            try:
                if self.store.get(key) == value:
                    self.store.delete(key)
            except OSError as exc:
                log.warning("could not remove %s: %s", key, exc)
        self.store.close()

    # ------------------------------------------------------------------ metadata

    def _fetch(self, segment: str) -> bytes | None:
        return self.store.get(self.layout.segment_key(segment))

    def lookup(self, peer: str, force: bool = False) -> SegmentDescriptor:
        return self.cache.lookup(peer, force)

    def set_ttl_ms(self, ttl_ms: float) -> None:
        self.cache.set_ttl_ms(ttl_ms)

    def _retire_instance(self, peer: str, old: SegmentDescriptor, new: SegmentDescriptor) -> None:
        self._retire(peer, old, f"instance {old.instance_id} replaced by {new.instance_id}")

    def _retire(self, peer: str, desc: SegmentDescriptor, why: str) -> None:
        where = self.locations.known(desc)
        self.locations.forget(desc.name)
        if where is None:
            self.counters.inc("endpoints_retired")
            log.info("retired connections of %s (none made: its location was never found): %s",
                     peer, why)
            return
        host, port = where
        dropped = self.transport.drop_peer(host, port)
        self.counters.inc("endpoints_retired")
        log.info("retired connections of %s at %s:%d (%s idle closed): %s",
                 peer, host, port, dropped, why)

    # ------------------------------------------------------------------ transfers

    def write(self, peer: str, offset: int, data: bytes) -> Outcome:
        return self._transfer(peer, lambda d: _first_buffer(d) + offset,
                              lambda h, p, a, v: self.transport.write(h, p, a, data,
                                                                     proto_version=v))

    def write_at(self, peer: str, addr: int, data: bytes) -> Outcome:
        return self._transfer(peer, lambda d: addr,
                              lambda h, p, a, v: self.transport.write(h, p, a, data,
                                                                     proto_version=v))

    def read(self, peer: str, offset: int, length: int) -> Outcome:
        return self._transfer(peer, lambda d: _first_buffer(d) + offset,
                              lambda h, p, a, v: self.transport.read(h, p, a, length,
                                                                    proto_version=v))

    def read_at(self, peer: str, addr: int, length: int) -> Outcome:
        return self._transfer(peer, lambda d: addr,
                              lambda h, p, a, v: self.transport.read(h, p, a, length,
                                                                    proto_version=v))

    def _transfer(self, peer: str, address: Callable[[SegmentDescriptor], int],
                  op: Callable[[str, int, int, int], Any]) -> Outcome:
        budget = self.profile.engine.retry_budget
        attempt = 0
        while True:
            force = attempt > 0
            try:
                desc = self.cache.lookup(peer, force=force)
            except LookupFailed as exc:
                error = str(exc)
            else:
                try:
                    host, port = self.locations.endpoint(desc)
                    if (host, port) not in self._addressed:
                        self._addressed[(host, port)] = peer
                    result = op(host, port, address(desc), desc.tcp_proto_version or 1)
                except PeerLocationError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                except (TransferError, ValueError) as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if isinstance(exc, TransferError):
                        self._retire(peer, desc, error)
                else:
                    self.counters.inc("transfers_ok")
                    return Outcome(True, result if isinstance(result, bytes) else None,
                                   retries=attempt)
            if attempt >= budget:
                self.counters.inc("transfers_failed")
                if budget:
                    self.counters.inc("retries_exhausted")
                    log.warning("transfer to %s failed after %d retries: %s",
                                peer, attempt, error)
                return Outcome(False, error=error, retries=attempt)
            attempt += 1
            self.counters.inc("transfer_retries")
            log.info("transfer to %s failed (%s); forcing a refresh, retry %d of %d",
                     peer, error, attempt, budget)

    # ------------------------------------------------------------------ own memory

    def local_read(self, offset: int, length: int) -> bytes:
        self._check_local(offset, length)
        return bytes(self.region.view[offset:offset + length])

    def local_write(self, offset: int, data: bytes) -> None:
        self._check_local(offset, len(data))
        self.region.view[offset:offset + len(data)] = data

    def _check_local(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.region.length:
            raise ValueError(f"[{offset}, {offset + length}) is outside our buffer of "
                             f"{self.region.length} bytes")

    def stats(self) -> dict[str, int]:
        out = self.counters.snapshot()
        out.update(self.connection_stats())
        return out

    def connection_stats(self) -> dict[str, int]:
        """peer_connections, peer_connections_stale, data_sessions (see the module doc)."""
        out: dict[str, int] = {}
        pool = getattr(self.transport, "pool", None)
        if pool is not None:
            current = set()
            for peer in set(self._addressed.values()):
                entry = self.cache.entry(peer)
                where = self.locations.known(entry.snapshot) if entry is not None else None
                if where is not None:
                    current.add(where)
            by_endpoint = pool.open_by_endpoint()
            out["peer_connections"] = sum(by_endpoint.values())
            out["peer_connections_stale"] = sum(n for ep, n in by_endpoint.items()
                                                if ep not in current)
        data_port = getattr(self.transport, "data_port", None)
        sockets = own_tcp_sockets() if data_port else None
        if sockets is not None:
            out["data_sessions"] = sum(s.state != LISTEN and s.local[1] == data_port
                                       for s in sockets)
        return out


def _first_buffer(desc: SegmentDescriptor) -> int:
    if not desc.buffers:
        raise ValueError(f"segment {desc.name!r} publishes no buffers")
    return desc.buffers[0].addr


def _compact(obj: Any) -> bytes:
    return (json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n").encode()
