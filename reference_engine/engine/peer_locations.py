"""Where a peer's TCP transport listens, found the way Mooncake's own reader finds it.

A descriptor of Mooncake 0.3.13 or later carries ``tcp_data_host``; one of 0.3.11 or 0.3.12
does not (0.3.11 also has no ``tcp_proto_version``). Mooncake's ``TcpTransport::startTransfer``
never takes the host from the segment name: it reads the peer's RPC entry
(``mooncake/rpc_meta/<segment>``, ``ip_or_host_name``, kept by ``TransferMetadata::
getRpcMetaEntry``) and connects there at the descriptor's ``tcp_data_port``; without that
entry the transfer fails ("Failed to find location of <segment>"). A segment name such as
``seg-w`` is no host at all. The entry is read once per descriptor snapshot (a new snapshot,
e.g. after a replacement, reads it again) and dropped when a transfer to it fails.
"""

from __future__ import annotations

import json
import threading

from reference_engine.descriptor import SegmentDescriptor
from reference_engine.metadata import KeyLayout, MetadataStore


class PeerLocationError(LookupError):
    """No host to reach a peer at (no ``tcp_data_host`` and no usable RPC entry)."""


class PeerLocations:
    """``endpoint(desc)`` -> ``(host, port)`` of a peer's data port (see the module doc)."""

    def __init__(self, store: MetadataStore, layout: KeyLayout):
        self.store = store
        self.layout = layout
        self._hosts: dict[str, tuple[SegmentDescriptor, str]] = {}
        self._lock = threading.Lock()

    def endpoint(self, desc: SegmentDescriptor) -> tuple[str, int]:
        port = desc.tcp_data_port or 0
        if desc.tcp_data_host:
            return desc.data_endpoint()
        with self._lock:
            known = self._hosts.get(desc.name)
        if known is not None and known[0] is desc:
            return known[1], port
        host = self._rpc_host(desc.name)
        with self._lock:
            self._hosts[desc.name] = (desc, host)
        return host, port

    def known(self, desc: SegmentDescriptor) -> tuple[str, int] | None:
        """The endpoint already found for this snapshot (no metadata I/O), or None."""
        if desc.tcp_data_host:
            return desc.data_endpoint()
        with self._lock:
            known = self._hosts.get(desc.name)
        return (known[1], desc.tcp_data_port or 0) if known and known[0] is desc else None

    def forget(self, name: str) -> None:
        with self._lock:
            self._hosts.pop(name, None)

    def _rpc_host(self, name: str) -> str:
        key = self.layout.rpc_meta_key(name)
        try:
            raw = self.store.get(key)
        except OSError as exc:
            raise PeerLocationError(f"segment {name!r} publishes no tcp_data_host and its RPC "
                                    f"entry {key} could not be read: {exc}") from None
        if raw is None:
            raise PeerLocationError(f"segment {name!r} publishes no tcp_data_host and has no RPC "
                                    f"entry {key} (Mooncake's reader fails the same way)")
        try:
            host = json.loads(raw).get("ip_or_host_name")
        except (ValueError, AttributeError):
            host = None
        if not isinstance(host, str) or not host:
            raise PeerLocationError(f"segment {name!r}: RPC entry {key} has no ip_or_host_name: "
                                    f"{raw[:200]!r}")
        return host
