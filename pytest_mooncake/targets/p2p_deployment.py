"""A deployment on ``P2PHANDSHAKE`` metadata, for any target: names, the "store", engines.

In P2P handshake mode there is no metadata store. A segment is named by its RPC address
(``host:port``); a peer's descriptor is whatever the live process there answers to a Metadata
handshake frame. Suites still say ``mc_engine("seg-a")`` and ``a.write("seg-b", ...)``, so:

- ``P2pDirectory`` gives each logical name of the test a ``127.0.0.1:PORT`` that stays its
  name across restarts (a same-name restart is a new process at the same address), claimed
  with the plugin's port claims (``runtime.ports``) and released at close. For real builds the
  two ports after it are claimed too: Mooncake draws its RPC port *and* its TCP data port from
  ``MC_MIN_RPC_PORT..MC_MAX_RPC_PORT``, so ``P..P+2`` is the engine's whole range (RPC ``P``,
  data one of the other two, a different one after each restart: ``P2pEngine.restart``).
- ``P2pMetadata`` is the ``MetadataHandle``: ``get`` of a segment key asks the live peer
  (Metadata frame, as an engine does); everything a store would be needed for (planting,
  deleting, listing, a proxy in front of it) raises ``TargetLacks(metadata_store)`` with a
  reason made from the deployment in this run.
- ``P2pEngine`` wraps a target's engine handle: it translates logical peer names to addresses.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.ports import claim_port, free_port, release_port
from pytest_mooncake.targets.base import Capability, ComponentStartError, TargetLacks
from pytest_mooncake.targets.handshake_frames import METADATA, HandshakeFrameError, exchange

P2P_URI = "P2PHANDSHAKE"
HANDSHAKE_TIMEOUT_S = 5.0
REBIND_WAIT_S = 120.0
"""How long a real build's ports may stay unbindable after its process was killed."""


class P2pDirectory:
    """Logical segment name -> ``127.0.0.1:PORT`` (see the module doc)."""

    def __init__(self, host: str = "127.0.0.1", span: int = 1):
        self.host = host
        self.span = span
        """Ports claimed per name, from PORT up (real builds: 3, their data port comes from the
        same range as the RPC port)."""
        self._names: dict[str, str] = {}
        self._ports: list[int] = []

    def address(self, segment: str) -> str:
        """The address ``segment`` is deployed at (claimed on first use)."""
        if _is_address(segment):
            return segment
        if segment not in self._names:
            self._names[segment] = f"{self.host}:{self._claim()}"
        return self._names[segment]

    def known(self, segment: str) -> str:
        """The address of a logical name given out before, else the name itself."""
        return self._names.get(segment, segment)

    def _claim(self) -> int:
        for _ in range(64):
            port = free_port(self.host)
            more = range(port + 1, port + self.span)
            claimed = [p for p in more if p < 32768 and claim_port(p)]
            if len(claimed) == len(more) and all(_bindable(self.host, p) for p in more):
                self._ports += [port, *more]
                return port
            for p in (port, *claimed):
                release_port(p)
        raise RuntimeError(f"no {self.span} free adjacent ports on {self.host} after 64 draws")

    def close(self) -> None:
        for port in self._ports:
            release_port(port)
        self._ports.clear()


def _data_port(raw: bytes | None) -> int | None:
    """``tcp_data_port`` of a descriptor as a peer answered it (None when there is none)."""
    try:
        port = json.loads(raw or b"null").get("tcp_data_port")
    except (ValueError, AttributeError):
        return None
    return port if isinstance(port, int) else None


def _is_address(name: str) -> bool:
    host, sep, port = name.rpartition(":")
    return bool(sep and host and port.isdigit())


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ask_peer(address: str, timeout: float = HANDSHAKE_TIMEOUT_S) -> bytes | None:
    """The descriptor the process at ``address`` answers to a Metadata frame (its JSON text),
    or None when nothing listens there (Mooncake's framing: ``handshake_frames``)."""
    host, _, port = address.rpartition(":")
    try:
        reply = exchange((host.strip("[]"), int(port)), METADATA, {}, timeout)
    except HandshakeFrameError as exc:
        if isinstance(exc.__cause__, ConnectionRefusedError):
            return None
        raise
    return json.dumps(reply).encode()


class P2pMetadata:
    """The ``MetadataHandle`` of a P2P deployment (see the module doc). ``deployment`` names
    the target as the run deployed it (its label), for the reasons it gives."""

    kind = "p2p"
    uri = P2P_URI

    def __init__(self, deployment: str, directory: P2pDirectory, accepted: str = ""):
        self.deployment = deployment
        self.directory = directory
        self.accepted = accepted
        """What the build answered when asked to initialise on P2PHANDSHAKE (real builds)."""

    def no_store(self, what: str) -> TargetLacks:
        """The n/a of an operation that needs a metadata store, in this run's words."""
        probe = f" ({self.accepted})" if self.accepted else ""
        return TargetLacks(Capability.METADATA_STORE, (
            f"{self.deployment} is deployed on P2PHANDSHAKE metadata (--mc-metadata=p2p){probe}: "
            f"there is no metadata store, so {what} has nothing to act on; a peer's descriptor "
            f"is what the live process at its host:port answers in the handshake"))

    def segment_key(self, segment: str) -> str:
        return f"mooncake/ram/{self.directory.known(segment)}"

    def rpc_meta_key(self, segment: str) -> str:
        return f"mooncake/rpc_meta/{self.directory.known(segment)}"

    def get(self, key: str) -> bytes | None:
        """A segment key: the descriptor the live peer answers (None: nothing listens)."""
        prefix = "mooncake/ram/"
        if not key.startswith(prefix) or not _is_address(key[len(prefix):]):
            raise self.no_store(f"reading key {key!r}")
        return ask_peer(key[len(prefix):])

    def put(self, key: str, value: bytes) -> None:
        raise self.no_store(f"planting a value under {key!r}")

    def delete(self, key: str) -> bool:
        raise self.no_store(f"deleting {key!r}")

    def keys(self, prefix: str = "") -> list[str]:
        raise self.no_store(f"listing keys under {prefix!r}")

    @property
    def address(self) -> str:
        raise self.no_store("a fault proxy in front of the store")

    def through(self, address: str) -> P2pMetadata:
        raise self.no_store("routing metadata traffic through a proxy")

    def close(self) -> None:
        self.directory.close()


PEER_CALLS = ("write", "read", "write_at", "read_at", "lookup", "submit_transfer")


class P2pEngine:
    """An engine handle of any target started at ``metadata.directory.address(segment)``:
    ``segment`` stays the logical name, ``segment_name`` is the address, and peers given by
    logical name are translated (beyond that, everything is the wrapped handle's)."""

    def __init__(self, engine: Any, metadata: P2pMetadata, segment: str):
        self._engine = engine
        self.metadata = metadata
        self.segment = segment
        self.segment_name = metadata.directory.address(segment)
        self.rebind_waits: list[float] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if name in PEER_CALLS:
            def call(peer: str, *args: Any, **kwargs: Any) -> Any:
                return attr(self.metadata.directory.known(peer), *args, **kwargs)
            return call
        return attr

    def restart(self, keep_addresses: bool = False) -> None:
        """A new process at the same address. A real build binds its RPC and data ports without
        SO_REUSEADDR, so while the killed process's connections sit in TIME_WAIT (60 s on
        Linux) the new one finds no port ("unable to find available tcp port"): for a directory
        of several ports per name (real builds) the old process is killed and the restart waits
        until its ports bind again (``rebind_waits`` records how long), so the restart judged
        is the one a deployment sees once the port is free. Unless ``keep_addresses``, the old
        data port is held while the new process starts, so its data port is a new one, as a
        process drawing from a deployment's range would have (a stale descriptor must not
        reach the new process by the accident of an equal port)."""
        span = self.metadata.directory.span
        if span < 2:
            self._engine.restart(keep_addresses)
            return
        old_data = None if keep_addresses else _data_port(self.metadata.get(
            self.metadata.segment_key(self.segment_name)))
        self._engine.kill()
        host, _, first = self.segment_name.rpartition(":")
        ports = range(int(first), int(first) + span)
        started = time.monotonic()
        try:
            wait_until(lambda: all(_bindable(host, p) for p in ports), REBIND_WAIT_S,
                       f"ports {ports.start}..{ports.stop - 1} of {self.segment} to bind again "
                       f"after its process was killed", interval=0.2, max_interval=1.0)
        except Timeout as exc:
            raise ComponentStartError(f"engine {self.segment}: {exc}") from None
        self.rebind_waits.append(time.monotonic() - started)
        with socket.socket() as hold:
            if old_data in ports:
                hold.bind((host, old_data))
            self._engine.restart(keep_addresses)

    def __repr__(self) -> str:
        return f"<P2pEngine {self.segment}={self.segment_name} {self._engine!r}>"


def start_deployed(start: Any, segment: str, metadata: Any) -> Any:
    """``start(name)`` started on ``metadata``: on P2P metadata at the address of ``segment``
    (claimed on first use) and wrapped in a ``P2pEngine``; otherwise as it is."""
    if getattr(metadata, "kind", "") != "p2p":
        return start(segment)
    return P2pEngine(start(metadata.directory.address(segment)), metadata, segment)
