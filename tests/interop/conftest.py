"""Interop with the real Mooncake 0.3.13 wheel: metadata backends and a real engine per backend.

Skipped, with the reason, where ``mooncake.engine`` cannot be imported.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

pytest.importorskip(
    "mooncake.engine",
    reason="the Mooncake wheel (mooncake-transfer-engine-non-cuda 0.3.13) "
    "is not installed; interop tests need a real engine",
)

from realengine import RealEngine  # noqa: E402

from pytest_mooncake.runtime.ports import free_port  # noqa: E402
from pytest_mooncake.runtime.processes import Supervisor, port_open  # noqa: E402
from reference_engine import descriptor  # noqa: E402
from reference_engine.metadata import KeyLayout, open_store  # noqa: E402
from reference_engine.transport import TcpTransport  # noqa: E402

BACKENDS = ["etcd", "http-reference", "http-mooncake"]


@dataclass
class Metadata:
    kind: str
    uri: str
    store: object


@pytest.fixture(scope="module", params=BACKENDS)
def metadata(request, tmp_path_factory):
    kind = request.param
    if kind == "etcd":
        etcd = request.getfixturevalue("mc_etcd")
        store = open_store(etcd.uri)
        yield Metadata(kind, etcd.uri, store)
        store.close()
        return
    sup = Supervisor(tmp_path_factory.mktemp(f"meta-{kind}"), name=kind)
    port = free_port()
    if kind == "http-reference":
        argv = [
            sys.executable,
            "-m",
            "reference_engine",
            "metadata-server",
            "--listen",
            f"127.0.0.1:{port}",
        ]
    else:
        exe = Path(sys.executable).parent / "mooncake_http_metadata_server"
        if not exe.exists():
            pytest.skip(f"the wheel's HTTP metadata server is not installed ({exe} missing)")
        argv = [str(exe), "--host", "127.0.0.1", "--port", str(port)]
    try:
        sup.start(kind, argv, ready=port_open(port), ready_timeout=20)
        uri = f"http://127.0.0.1:{port}/metadata"
        store = open_store(uri)
        yield Metadata(kind, uri, store)
        store.close()
    finally:
        sup.stop_all()


@pytest.fixture(scope="module")
def real_engine(metadata, tmp_path_factory):
    """One real Mooncake engine (own process) on the backend under test."""
    log = tmp_path_factory.mktemp("real-engine") / "engine.log"
    eng = RealEngine(f"127.0.0.1:{free_port()}", metadata.uri, log)
    yield eng
    eng.close()


class ReferenceSegment:
    """A reference transport serving an mmap'd buffer, published the way Mooncake publishes."""

    def __init__(self, size: int = 4 << 20) -> None:
        self.mem = mmap.mmap(-1, size)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.size = size
        self.transport = TcpTransport(io_timeout=20.0)
        self.transport.register_buffer(self.addr, memoryview(self.mem))
        self.port = self.transport.start()
        self.name = f"127.0.0.1:{free_port()}"

    def publish(
        self,
        store,
        *,
        instance_id: str | None,
        advertised_size: int | None = None,
        proto_version: int = 2,
    ):
        layout = KeyLayout()
        desc = descriptor.tcp_descriptor(
            self.name,
            [(self.addr, advertised_size or self.size)],
            "127.0.0.1",
            self.port,
            instance_id,
        )
        desc = replace(desc, tcp_proto_version=proto_version)
        raw = descriptor.encode(desc)
        store.put(layout.segment_key(self.name), raw)
        rpc_port = int(self.name.rsplit(":", 1)[1])
        store.put(
            layout.rpc_meta_key(self.name),
            json.dumps({"ip_or_host_name": "127.0.0.1", "rpc_port": rpc_port}).encode(),
        )
        return raw

    def close(self) -> None:
        self.transport.stop()


@pytest.fixture
def ref_segment():
    seg = ReferenceSegment()
    yield seg
    seg.close()
