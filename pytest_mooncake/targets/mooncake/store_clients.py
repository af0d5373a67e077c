"""The one store-client launcher: a real ``mooncake.store`` client (``MooncakeDistributedStore``)
in a driver process, found by its cluster id on etcd, driven over the driver's control socket.
Used for the clients of a master cluster this family starts and for a client of this build on
another Mooncake target's masters (mixed master/client pairs)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.runtime.processes import ManagedProcess, ProcessStartError
from pytest_mooncake.targets.base import ComponentStartError
from pytest_mooncake.targets.mooncake.driver.control_channel import (
    ControlClient,
    b64,
    read_ready_file,
    unb64,
)
from pytest_mooncake.targets.mooncake.launchers import Launcher


@dataclass
class StoreClient:
    """A real ``mooncake.store`` client in a driver process. Each call returns
    ``{"ok": bool, "result": {...}}`` or ``{"ok": False, "error": ...}`` (the shape the reference
    target's clients use)."""

    index: int
    process: ManagedProcess
    control: ControlClient
    hostname: str = ""
    """``MooncakeDistributedStore.get_hostname()``: the name its segment is mounted under."""
    history: list[dict[str, Any]] = field(default_factory=list)

    def _op(self, op: str, **args: Any) -> dict[str, Any]:
        started = time.time()
        reply = self.control.call(op, **args)
        ok = bool(reply.pop("ok", False))
        result = {"ok": ok, "result": reply} if ok else {"ok": False, "error": reply.get(
            "error") or f"{op} returned rc={reply.get('rc')}", "result": reply}
        self.history.append({"op": op, "args": {k: v for k, v in args.items() if k != "data"},
                             "start": started, "end": time.time(), "result": result})
        return result

    def put(self, key: str, size: int = 64, data: bytes | None = None) -> dict[str, Any]:
        """Put ``data`` (default ``size`` bytes derived from the key, so a get can be checked)."""
        return self._op("put", key=key, data=b64(data if data is not None else payload(key, size)))

    def get(self, key: str) -> dict[str, Any]:
        out = self._op("get", key=key)
        res = out.get("result", {})
        if out["ok"]:
            data = unb64(res.pop("data", ""))
            res["size"], res["data"] = len(data), data
            if not res.get("found"):
                return {"ok": False, "error": f"get {key!r}: not found (empty reply)", "result": res}
        return out

    def exists(self, key: str) -> dict[str, Any]:
        return self._op("exists", key=key)

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        """``force`` skips the object's lease (0.3.13 refuses to remove a leased object)."""
        return self._op("remove", key=key, force=force)

    def kill(self) -> None:
        self.control.close()
        self.process.kill()

    def stop(self) -> None:
        self.control.close()
        self.process.terminate(timeout=3)

    def alive(self) -> bool:
        return self.process.alive()


@dataclass
class RefusedStoreClient:
    """A store client whose build refused the masters (a version mismatch its setup logged):
    every call answers ``ok: False`` with that line, as the build's refusal, for the test to
    judge (a mixed-release cluster that does not serve one build's clients)."""

    index: int
    why: str
    hostname: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    def _refused(self, op: str) -> dict[str, Any]:
        return {"ok": False, "error": f"{op}: {self.why}", "result": {}}

    def put(self, key: str, size: int = 64, data: bytes | None = None) -> dict[str, Any]:
        return self._refused("put")

    def get(self, key: str) -> dict[str, Any]:
        return self._refused("get")

    def exists(self, key: str) -> dict[str, Any]:
        return self._refused("exists")

    def remove(self, key: str, force: bool = False) -> dict[str, Any]:
        return self._refused("remove")

    def kill(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def alive(self) -> bool:
        return False


PROTOCOL = "mooncake-coro-rpc"
"""``Target.master_protocol`` of Mooncake builds: mooncake_master's RPC (coro_rpc with
struct_pack), spoken by ``mooncake.store`` clients."""


def start_store_client(launcher: Launcher, workdir: Path, etcd: list[str], cluster_id: str,
                       index: int, client_id: str | None, ready_timeout: float,
                       master: str | None = None) -> StoreClient | RefusedStoreClient:
    """A real ``mooncake.store`` client in a driver process on the cluster ``cluster_id`` of
    ``etcd`` (it finds the leader there, or talks to ``master``, ``host:port`` of a master
    without HA); ready once ``setup`` returned 0."""
    ready_file = Path(workdir) / f"client-{index}.ready"
    ready_file.unlink(missing_ok=True)
    te_port = launcher.port()
    etcd_uri = "etcd://" + ";".join(etcd)
    name = f"mooncake-client-{cluster_id}-{client_id or index}"
    control = launcher.control_port
    argv = launcher.driver_argv(
        "store", "--hostname", f"{launcher.host_name(name)}:{te_port}",
        "--metadata", etcd_uri, "--master", master or etcd_uri, "--ready-file", str(ready_file),
        "--control-host", launcher.bind_host, "--control-port", str(control))
    env = {"MC_STORE_CLUSTER_ID": cluster_id}

    def ready(_: ManagedProcess) -> bool:
        return ready_file.exists()

    ready.__doc__ = "the store driver wrote its ready file (setup returned 0)"
    try:
        proc = launcher.start(name, argv, env, ready, ready_timeout,
                              publish=[control] if control else [])
    except ProcessStartError as exc:
        launcher.release(te_port)
        refused = family.CLIENT_LOG_PATTERNS["version_mismatch"].search(str(exc))
        if refused is not None:
            return RefusedStoreClient(index, (
                f"the store client of {launcher.version} refused the masters of cluster "
                f"{cluster_id}: its setup logged '{refused[0]}' (a client refuses a master "
                f"whose ServiceReady version is not its own)"))
        raise ComponentStartError(f"store client {name} of {launcher.version} did not attach "
                                  f"to cluster {cluster_id}: {exc}") from None
    info = read_ready_file(ready_file) or {}
    port = launcher.host_port(proc, control or int(info["control_port"]))
    client = StoreClient(index, proc, ControlClient(proc, port, host=launcher.host_address(proc)), str(info.get("hostname", "")))
    launcher.release(te_port)
    return client


def payload(key: str, size: int) -> bytes:
    seed = key.encode() or b"-"
    return (seed * (size // len(seed) + 1))[:size]
