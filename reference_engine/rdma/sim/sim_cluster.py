"""A simulated cluster: nodes with NICs and registered memory on one ``SimFabric``, one
``RdmaTransport`` per node, an in-memory metadata directory and handshake RPC between them.

Controlled mode (``controlled=True``) uses virtual time and leaves WR delivery to the
scheduler (``fabric_actor``); free mode delivers inside ``post_send`` and runs on real time.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reference_engine.descriptor import SegmentDescriptor, encode
from reference_engine.profiles import Profile, resolve_profile
from reference_engine.rdma import points as P
from reference_engine.rdma.clock import RealClock
from reference_engine.rdma.config import RdmaConfig
from reference_engine.rdma.handshake_rpc import HandshakeServer, tcp_rpc
from reference_engine.rdma.rdma_transport import RdmaTransport
from reference_engine.rdma.sim.sim_verbs import SimFabric, SimNode
from reference_engine.rdma.sim.virtual_clock import VirtualClock


class SimDirectory:
    """Published descriptors plus one cached copy per reader: ``force`` re-reads the published
    value, otherwise the cached one is served (an infinite-TTL cache; tests refresh by force)."""

    def __init__(self) -> None:
        self.published: dict[str, SegmentDescriptor] = {}
        self.raw: dict[str, bytes] = {}
        self.cached: dict[tuple[str, str], SegmentDescriptor] = {}
        self.fail_refresh = 0
        self.fetches = 0

    def publish(self, desc: SegmentDescriptor) -> None:
        self.published[desc.name] = desc
        self.raw.pop(desc.name, None)

    def fetch(self, segment: str) -> bytes | None:
        """The published value as a metadata store holds it (for ``SegmentCache``); encoded on
        first read, as most simulated runs never read raw values."""
        if self.fail_refresh:
            self.fail_refresh -= 1
            raise OSError(f"injected metadata failure fetching {segment!r}")
        self.fetches += 1
        raw = self.raw.get(segment)
        if raw is None and segment in self.published:
            raw = self.raw[segment] = encode(self.published[segment])
        return raw

    def lookup_for(self, reader: str):
        def lookup(segment: str, force: bool) -> SegmentDescriptor | None:
            key = (reader, segment)
            if not force and key in self.cached:
                return self.cached[key]
            if self.fail_refresh:
                self.fail_refresh -= 1
                return None
            self.fetches += 1
            desc = self.published.get(segment)
            if desc is not None:
                self.cached[key] = desc
            return desc
        return lookup


@dataclass
class SimPeer:
    name: str
    node: SimNode
    transport: RdmaTransport
    buffer_addr: int
    buffer_len: int

    def read(self, offset: int, length: int) -> bytes:
        return self.node.memory.read(self.buffer_addr + offset, length)

    def write(self, offset: int, data: bytes) -> None:
        self.node.memory.write(self.buffer_addr + offset, data)


class SimCluster:
    def __init__(self, profile: str | Profile = "rfc", *, controlled: bool = False,
                 seed: int = 0, env: Mapping[str, str] | None = None, observer=None,
                 lookup_for=None, tcp_handshake: bool = False, **config):
        self.profile = resolve_profile(profile)
        self.controlled = controlled
        self.fabric = SimFabric(auto_deliver=not controlled)
        self.clock = VirtualClock() if controlled else RealClock()
        self.rng = random.Random(seed)
        self.config = RdmaConfig.from_env(env or {}, **config)
        self.directory = SimDirectory()
        self.lookup_for = lookup_for or self.directory.lookup_for
        """reader name -> ``lookup(segment, force)``; e.g. a ``SegmentCache(...).lookup`` over
        ``directory.fetch``."""
        self.peers: dict[str, SimPeer] = {}
        self.tcp_handshake = tcp_handshake
        """Run handshakes over real loopback sockets in Mooncake's framing (handshake_rpc)."""
        self.servers: dict[str, HandshakeServer] = {}
        self._tcp_rpc = tcp_rpc(self._handshake_address)
        self.observer = observer
        if observer is not None:
            self.fabric.observer = observer

    def _instance_id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def add_node(self, name: str, nics: Sequence[str] = ("mlx5_0",), buffer_len: int = 1 << 20,
                 buffer_addr: int | None = None, publish: bool = True,
                 key_skip: int = 0) -> SimPeer:
        """``key_skip``: memory registrations the process made before its buffer (so its rkeys
        differ from those of a process that registered the buffer first)."""
        gids = [(nic, f"fe80::{zlib.crc32(f'{name}/{nic}'.encode()) & 0xffff:x}:{i}")
                for i, nic in enumerate(nics)]
        node = self.fabric.add_node(name, gids)
        for ctx in node.contexts.values():
            ctx.mr_seq += key_skip
        addr = node.memory.alloc(buffer_len, buffer_addr)
        tr = RdmaTransport(
            name, [node.open(nic) for nic in nics], lookup=self.lookup_for(name),
            rpc=self._tcp_rpc if self.tcp_handshake else self.rpc, policies=self.profile.rdma,
            config=self.config, clock=self.clock,
            instance_id=self.profile.identity.instance_id(self._instance_id),
            observer=self.observer)
        tr.register_buffer(addr, buffer_len)
        if self.tcp_handshake:
            old_server = self.servers.pop(name, None)
            if old_server is not None:
                old_server.close()
            self.servers[name] = HandshakeServer(tr.on_handshake)
        peer = SimPeer(name, node, tr, addr, buffer_len)
        self.peers[name] = peer
        if publish:
            self.directory.publish(tr.local_descriptor())
        if self.observer is not None:
            self.observer.watch(tr)
        return peer

    def restart_node(self, name: str, same_instance: bool = False,
                     same_rkeys: bool = True) -> SimPeer:
        """The process dies and a new one takes the same segment name, NIC names, GIDs, buffer
        address and (by registration order) the same rkeys; only ``instance_id`` differs.
        ``same_rkeys=False``: the new process registers its buffer under other rkeys (as if
        it had registered other memory first)."""
        old = self.peers[name]
        old.transport.stop()
        old.transport.defunct = True
        old.node.shutdown()
        nics = [ctx.device_name for ctx in old.transport.contexts]
        peer = self.add_node(name, nics, old.buffer_len, old.buffer_addr, publish=False,
                             key_skip=0 if same_rkeys else 1)
        if same_instance:
            peer.transport.instance_id = old.transport.instance_id
        self.directory.publish(peer.transport.local_descriptor())
        return peer

    def _handshake_address(self, server: str):
        srv = self.servers.get(server)
        return srv.address if srv is not None else None

    def close(self) -> None:
        """Stop threads and handshake servers."""
        self.stop()
        for srv in self.servers.values():
            srv.close()
        self.servers.clear()

    def rpc(self, server: str, request: Mapping) -> Mapping:
        peer = self.peers.get(server)
        if peer is None or not peer.node.alive:
            raise ConnectionRefusedError(f"no handshake listener for {server!r}")
        return peer.transport.on_handshake(request)

    # ------------------------------------------------------------------ running
    def fabric_actor(self):
        fabric = self.fabric
        while True:
            if fabric.deliver_one():
                yield P.DELIVER
            else:
                yield P.IDLE

    def fabric_has_work(self) -> bool:
        return self.fabric.deliverable > 0

    def actors(self) -> list:
        out = []
        for peer in self.peers.values():
            if peer.node.alive:
                out.extend(peer.transport.actors())
        if self.controlled:
            out.append(("fabric", self.fabric_actor(), self.fabric_has_work))
        return out

    def start(self) -> None:
        for peer in self.peers.values():
            peer.transport.start()

    def stop(self, timeout: float = 5.0) -> bool:
        ok = True
        for peer in self.peers.values():
            ok = peer.transport.stop(timeout) and ok
        return ok
