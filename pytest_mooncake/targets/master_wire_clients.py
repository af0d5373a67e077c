"""``MasterClusterHandle.wire_client`` for masters that speak mooncake_master's RPC (real
``mooncake_master`` processes, and reference masters through their coro_rpc listener): our
own client of the master RPC (``pytest_mooncake.master_rpc``), probed against the master
before it is handed out, so a verdict never rests on a layout the master did not accept in
this run, nor on a version channel the probe did not find."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc.client import (
    Answer,
    MasterRpcClient,
    RpcClosed,
    RpcError,
    RpcTimeout,
    decode_answer,
)
from pytest_mooncake.master_rpc.layouts import LAYOUTS, by_name, expected
from pytest_mooncake.master_rpc.probe import ProbeResult, error_name, probe
from pytest_mooncake.targets.base import Capability, TargetLacks

SEGMENT_SIZE = 64 << 20
FAKE_BASE = 0x7E0000000000
"""The wire client mounts a segment the master only books (no memory behind it, nothing is
transferred): allocations land in it and are committed as the master would commit a store
client's."""


class OfferingRpcClient(MasterRpcClient):
    """A master RPC client that opens every connection with ServiceReady carrying
    ``version`` (the channel a reference master's listener judges; ``probe.py``)."""

    def __init__(self, address: str, layout: Any, timeout: float, version: str):
        super().__init__(address, layout, timeout)
        self.version = version
        self.handshakes: list[Answer] = []

    def connect(self, timeout: float | None = None) -> None:
        fresh = self._sock is None
        super().connect(timeout)
        if fresh:
            raw = self.exchange("ServiceReady", sp.serialize(sp.STR, self.version), timeout)
            self.handshakes.append(decode_answer("ServiceReady", expected(sp.STR), raw))


class MooncakeWireClient:
    """``WireClientHandle`` over one connection to one master."""

    def __init__(self, address: str, speaks: str, found: ProbeResult, version: str | None,
                 timeout: float, ids: Any, judged_against: str | None = None):
        self.address = address
        self.speaks = speaks
        self.own = found.layout.name
        offers = found.takes_version and version is not None
        self.offered_version = version if offers else None
        """None: the master's RPC has no place for it (``version_channel``)."""
        self.requested_version = version
        self.version_channel = found.version_channel
        self.master_version = judged_against or found.master_version or ""
        self.timeout = timeout
        self._rpc = (OfferingRpcClient(address, by_name(speaks), timeout, version) if offers
                     else MasterRpcClient(address, by_name(speaks), timeout))
        self._client_id = (next(ids), next(ids))
        self._segment_id = (next(ids), next(ids))
        self._mounted = False

    def _answer(self, call, *args, timeout: float | None = None) -> dict[str, Any]:
        try:
            answer: Answer = call(*args, timeout=timeout or self.timeout)
        except RpcTimeout as exc:
            return {"ok": False, "error": f"timeout: {exc}", "timed_out": True}
        except RpcError as exc:
            return {"ok": False, "error": f"refused: {exc}", "refused": True}
        except RpcClosed as exc:
            return {"ok": False, "error": f"connection closed: {exc}"}
        if answer.ok:
            return {"ok": True, "result": answer.value}
        return {"ok": False, "error": error_name(answer.error)}

    def _mount(self, timeout: float | None) -> dict[str, Any] | None:
        if self._mounted:
            return None
        segment = {"id": self._segment_id, "name": f"wire-{self._segment_id[0]:x}",
                   "base": FAKE_BASE, "size": SEGMENT_SIZE,
                   "te_endpoint": f"127.0.0.1:{1 + self._segment_id[1] % 60000}"}
        mounted = self._answer(self._rpc.mount_segment, segment, self._client_id,
                               timeout=timeout)
        if not mounted["ok"] and mounted.get("error") != "SEGMENT_ALREADY_EXISTS":
            return mounted
        self._mounted = True
        return None

    def put(self, key: str, size: int = 64, timeout: float | None = None) -> Mapping[str, Any]:
        failed = self._mount(timeout)
        if failed:
            return {**failed, "error": f"mounting its segment: {failed['error']}"}
        started = self._answer(self._rpc.put_start, self._client_id, key, size,
                               timeout=timeout)
        if not started["ok"]:
            return {**started, "error": f"PutStart: {started['error']}"}
        ended = self._answer(self._rpc.put_end, self._client_id, key, timeout=timeout)
        return ended if ended["ok"] else {**ended, "error": f"PutEnd: {ended['error']}"}

    def get(self, key: str, timeout: float | None = None) -> Mapping[str, Any]:
        return self._answer(self._rpc.get_replica_list, key, timeout=timeout)

    def exists(self, key: str, timeout: float | None = None) -> Mapping[str, Any]:
        answer = self._answer(self._rpc.exist_key, key, timeout=timeout)
        if answer["ok"]:
            answer["result"] = {"exists": bool(answer["result"])}
        return answer

    def remove(self, key: str, timeout: float | None = None) -> Mapping[str, Any]:
        return self._answer(self._rpc.remove, key, True, timeout=timeout)

    def ping(self, timeout: float | None = None) -> Mapping[str, Any]:
        return self._answer(self._rpc.ping, self._client_id, timeout=timeout)

    def drop(self) -> None:
        self._rpc.close()

    def close(self) -> None:
        """Unmount its segment (bounded by 2 s) and close the connection."""
        if self._mounted:
            self._answer(self._rpc.unmount_segment, self._segment_id, self._client_id,
                         timeout=2.0)
        self._rpc.close()


class MasterWireClients:
    """The wire-client part of a Mooncake master cluster (mixed into it); needs ``masters``
    (with ``process`` and ``rpc_port``), ``launcher``, ``leader()`` and ``build``."""

    def _wire_state(self) -> dict:
        if not hasattr(self, "_wire"):
            self._wire = {"probes": {}, "clients": [], "ids": itertools.count(0x5EED0001)}
        return self._wire

    def rpc_address(self, index: int) -> str:
        m = self.masters[index]
        try:
            port = self.launcher.host_port(m.process, m.rpc_port)
        except Exception as exc:  # a container that does not publish the RPC port
            raise TargetLacks(Capability.MASTER_WIRE, (
                f"master {index}'s RPC port {m.rpc_port} is not reachable from the test "
                f"process ({type(exc).__name__}: {exc})")) from None
        return f"127.0.0.1:{port}"

    def wire_probe(self, index: int) -> ProbeResult:
        """The probe of master ``index`` (run once per master address, without writing)."""
        address = self.rpc_address(index)
        probes = self._wire_state()["probes"]
        if address not in probes:
            probes[address] = probe(address, write=False)
        return probes[address]

    def wire_revisions(self) -> list[str]:
        return [layout.name for layout in LAYOUTS]

    def wire_judged_version(self, found: ProbeResult) -> str | None:
        """The version these masters judge a client's against (default: what ServiceReady
        answers)."""
        return found.master_version

    def wire_client(self, master: int | None = None, speaks: str | None = None,
                    version: str | None = None, timeout: float = 5.0) -> MooncakeWireClient:
        index = self.leader() if master is None else master
        found = self.wire_probe(index)
        if not found.usable:
            raise TargetLacks(Capability.MASTER_WIRE, found.lack_reason())
        if speaks is not None and speaks not in self.wire_revisions():
            raise ValueError(f"wire_client: unknown revision {speaks!r} (known: "
                             f"{', '.join(self.wire_revisions())})")
        state = self._wire_state()
        client = MooncakeWireClient(self.rpc_address(index), speaks or found.layout.name,
                                    found, version, timeout, state["ids"],
                                    self.wire_judged_version(found))
        state["clients"].append(client)
        return client

    def close_wire_clients(self) -> None:
        """Close their connections (the masters are going: nothing is unmounted)."""
        for client in self._wire_state()["clients"]:
            client.drop()
        self._wire_state()["clients"].clear()
