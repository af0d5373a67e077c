"""Connecting to etcd: one ``etcd3`` client per endpoint list, every call with a deadline."""

from __future__ import annotations

import os
from collections.abc import Sequence

from reference_engine.etcd_connection import ReconnectingEtcd, etcd3_client

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")


class EtcdUnavailable(Exception):
    """etcd did not answer (down, partitioned, or timed out)."""


def parse_endpoints(spec: str | Sequence[str]) -> list[str]:
    """``"h:p,h:p"``, ``"etcd://h:p;h:p"`` or a list -> ``["h:p", ...]``."""
    if isinstance(spec, str):
        spec = spec.removeprefix("etcd://").replace(";", ",").split(",")
    endpoints = [e.strip() for e in spec if e.strip()]
    if not endpoints:
        raise ValueError("etcd endpoints: none given")
    for e in endpoints:
        host, _, port = e.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {e!r}: expected host:port")
    return endpoints


def connect(endpoints: Sequence[str], timeout: float) -> ReconnectingEtcd:
    """An etcd3 client on the first endpoint (etcd3 0.12 speaks to one endpoint) that dials
    anew after a call could not reach etcd (``reference_engine/etcd_connection.py``)."""
    host, _, port = endpoints[0].rpartition(":")
    return ReconnectingEtcd(lambda: etcd3_client(host, int(port), timeout))


def is_etcd_failure(exc: BaseException) -> bool:
    """True for errors that mean "etcd did not answer", as opposed to a programming error."""
    import etcd3.exceptions as ex
    import grpc

    return isinstance(exc, (ex.Etcd3Exception, grpc.RpcError, EtcdUnavailable, TimeoutError,
                            ConnectionError))
