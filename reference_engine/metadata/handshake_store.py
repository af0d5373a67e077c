"""``P2PHANDSHAKE`` metadata: no store; every engine serves its own descriptor on its RPC port.

What Mooncake's transfer engine does in this mode (``transfer_metadata.cpp``,
``transfer_metadata_plugin.cpp``), and so what this module does:

- the segment name *is* the RPC address, ``host:port``; the handshake daemon listens there;
- publishing a descriptor writes nothing anywhere: the daemon answers with the newest one;
- a lookup of a peer connects to the ``host:port`` its name spells and sends a Metadata frame
  (type 1, the handshake framing of ``rdma.handshake_rpc``) carrying our own descriptor; the
  peer answers with its descriptor, as it would be stored under ``mooncake/ram/<name>``;
- a peer's RPC entry (``rpc_meta``) is the name parsed, never read from anywhere;
- removing drops the local value only.

So the "store" a cache refreshes from is the live peer: a dead peer is a failed read
(``MetadataError``), a restarted one at the same ``host:port`` answers with its new descriptor.
The reference differs from Mooncake in one point on purpose: Mooncake ignores the port of the
name it is given and picks a free one in ``MC_MIN_RPC_PORT..MC_MAX_RPC_PORT``; the reference
binds the port the name gives (0 or none: any free one), so a same-name restart is one flag.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from reference_engine.metadata.keys import KeyLayout
from reference_engine.metadata.store import MetadataError
from reference_engine.metadata.uri import MetadataUriError
from reference_engine.rdma.handshake_rpc import METADATA, HandshakeError, HandshakeServer, send

log = logging.getLogger("reference_engine.metadata.p2p")

P2P_URI = "P2PHANDSHAKE"


def split_server_name(name: str, default_port: int = 0) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> (host, port); a name without a port gets
    ``default_port``, as Mooncake's ``parseHostNameWithPort`` does."""
    text = name.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise MetadataUriError(f"P2P segment name {name!r} has no host")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise MetadataUriError(f"P2P segment name {name!r}: bad port {port_text!r}")
    return host, int(port_text)


class HandshakeStore:
    """The ``MetadataStore`` of an engine in P2P handshake mode (see the module doc).

    ``segment_name`` is the name the engine must publish under: ``host:port`` of the daemon.
    """

    uri = P2P_URI

    def __init__(self, name: str, layout: KeyLayout | None = None, timeout: float = 3.0):
        host, port = split_server_name(name)
        self.layout = layout or KeyLayout.from_env()
        self.timeout = timeout
        self._local: dict[str, bytes] = {}
        self._lock = threading.Lock()
        try:
            self._server = HandshakeServer(self._refuse_connection, host=host, port=port,
                                           on_metadata=self._answer_metadata)
        except OSError as exc:
            raise MetadataError("p2p", "listen", f"{host}:{port}", str(exc)) from None
        self.host = host
        self.port = self._server.address[1]
        self.segment_name = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.served = 0
        """Metadata requests answered with a descriptor."""
        log.info("P2P handshake daemon of %s listening", self.segment_name)

    # ------------------------------------------------------------------ the daemon

    def _answer_metadata(self, request: Any) -> Any:
        raw = self._local.get(self.layout.segment_key(self.segment_name))
        if raw is None:  # Mooncake answers null before its segment is registered
            return None
        self.served += 1
        return json.loads(raw)

    @staticmethod
    def _refuse_connection(request: Any) -> dict:
        return {"reply_msg": "no transport here takes QP handshakes"}

    # ------------------------------------------------------------------ MetadataStore

    def _peer_of(self, key: str) -> tuple[str, str]:
        """(``ram``|``rpc_meta``, peer name) of a key under our layout."""
        prefix = self.layout.prefix
        if key.startswith(prefix + "rpc_meta/"):
            return "rpc_meta", key[len(prefix) + len("rpc_meta/"):]
        if key.startswith(prefix + "ram/"):
            return "ram", key[len(prefix) + len("ram/"):]
        raise MetadataError("p2p", "get", key, "P2P handshake mode has no store: only a "
                            "peer's segment descriptor and RPC entry can be asked for")

    def get(self, key: str) -> bytes | None:
        with self._lock:
            own = self._local.get(key)
        if own is not None:
            return own
        kind, peer = self._peer_of(key)
        try:
            host, port = split_server_name(peer)
        except MetadataUriError as exc:
            raise MetadataError("p2p", "handshake", key, str(exc)) from None
        if not port:
            raise MetadataError("p2p", "handshake", key,
                                f"segment name {peer!r} is no host:port, so no peer to ask")
        if kind == "rpc_meta":
            return (json.dumps({"ip_or_host_name": host, "rpc_port": port},
                               separators=(",", ":")) + "\n").encode()
        mine = self._local.get(self.layout.segment_key(self.segment_name))
        try:
            reply = send((host, port), METADATA, json.loads(mine) if mine else {},
                         connect_timeout=self.timeout, recv_timeout=self.timeout)
        except HandshakeError as exc:
            raise MetadataError("p2p", "handshake", key, str(exc)) from None
        return (json.dumps(reply, separators=(",", ":")) + "\n").encode()

    def put(self, key: str, value: bytes) -> None:
        with self._lock:
            self._local[key] = bytes(value)

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._local.pop(key, None) is not None

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._local if k.startswith(prefix))

    def close(self) -> None:
        self._server.close()
