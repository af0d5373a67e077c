"""``EngineHandle`` over an engine of an existing deployment (the cluster target).

An engine entry of the cluster file says how it is reached (``control`` + ``protocol``, see
``deployment/control_wires``) and, through its ``component``, how it is driven on its node. Its
``lifecycle`` says whose process it is:

- ``attach``: the deployment's running engine, used as it is. A test may kill or restart it
  where ``[faults].allow`` lets it; the handle starts it again when the test ends if the test
  left it down.
- ``per_test``: started for the test that asks for it (a running one is stopped first, so every
  test has a fresh process, as on the local targets), stopped when the test ends (its leftover
  keys removed where ``metadata_writes`` is allowed). Such a start may route the engine's
  metadata traffic through a proxy: the component's command line reads ``$MC_METADATA``.

An entry without ``control`` is an operator's engine the run cannot drive: its descriptor (by
its segment name, never the file's alias), its liveness, sockets and log (on its node) are
observed; transfers are n/a naming what is missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.nodes.proc_sockets import Socket
from pytest_mooncake.schemas.cluster_manifest import ClusterFile, EngineEntry
from pytest_mooncake.targets.base import (
    Capability,
    LookupResult,
    MetadataHandle,
    TargetError,
    TargetLacks,
    TransferResult,
)
from pytest_mooncake.targets.log_events import count_events
from pytest_mooncake.targets.mooncake.cache_knobs import CacheKnobs, bound_ms
from pytest_mooncake.targets.mooncake.deployment.control_wires import ENGINE_WIRES
from pytest_mooncake.targets.mooncake.deployment.node_control import (
    ComponentControl,
    FleetHolder,
    not_allowed,
)
from pytest_mooncake.targets.mooncake.driver.control_channel import ControlError
from pytest_mooncake.targets.mooncake.driver.engine_proxies import (
    EngineRestartFailed,
    PublishedDescriptor,
)

METADATA_VAR = "MC_METADATA"
"""The environment variable a per-test engine's command line takes its metadata URI from."""


LOG_LINES = 5000
"""How much of a component's log ``logs`` reads before cutting it to this handle's part."""


def own_part(log: str, pid: int | None) -> str:
    """``log`` from the first line its process ``pid`` wrote: the driver's and the reference
    engine's ready lines name it (``"pid": N``), glog lines carry it as the thread id of the
    main thread. The whole text where none does (an attached engine's start is older)."""
    if pid is None:
        return log
    glog = re.compile(rf"^[IWEF]\d{{4}} [\d:.]+\s+{pid} ")
    ready = re.compile(rf'"pid": {pid}\b')
    lines = log.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if ready.search(line) or glog.match(line):
            return "".join(lines[i:])
    return log


NO_TTL = ("a driver engine reads its cache bound (MC_TE_METADATA_REFRESH_INTERVAL_SECONDS) "
          "from its environment at start: the cluster target sets it only for a lifecycle = "
          "\"per_test\" engine with a `start` component whose [[engines]] entry lists that "
          "setting in cache_env")


def cache_ttl_lacks(entry: EngineEntry, file: ClusterFile) -> str | None:
    """Why a test cannot bound this engine's remote segment cache (None: it can). A reference
    engine sets it over its control channel; a driver engine reads it from its environment
    at start, so only a per-test engine whose build's settings the file names (``cache_env``)
    and whose component the run starts with a command line can have it."""
    if ENGINE_WIRES[entry.protocol].sets_ttl:
        return None
    component = file.component(entry.component) if entry.component else None
    if (entry.lifecycle != "per_test" or component is None or component.start is None
            or CacheKnobs.of(entry.cache_env, entry.segment).missing() is not None):
        return NO_TTL
    return None


class DeploymentEngine(PublishedDescriptor):
    """One engine of the cluster file, attached or started for the test."""

    def __init__(self, entry: EngineEntry, file: ClusterFile, fleet: FleetHolder,
                 metadata: MetadataHandle, lacks: Mapping[Capability, str],
                 route: str | None = None, ttl_ms: float | None = None):
        self.entry = entry
        self.file = file
        self.segment = entry.segment
        self.metadata = metadata
        self.lacks = dict(lacks)
        self.route = route
        self.node = (ComponentControl(fleet, entry.component, Capability.ENGINE_RESTART)
                     if entry.component else None)
        self.wire = (ENGINE_WIRES[entry.protocol](entry.segment, entry.control, metadata,
                                                   self.lacks) if entry.control else None)
        self.took_down = False
        """The test killed or stopped it and it has not been started since."""
        self.pid: int | None = None
        self._ttl_ms: float | None = None
        """The TTL set over its control channel (a reference engine)."""
        self.first_pid: int | None = None
        """Its first process in this handle: where its part of the component's log begins."""
        self.cache_env = self._cache_env(ttl_ms)
        """What bounds its cache, set at every start (a driver engine reads it only then)."""
        if entry.lifecycle == "per_test":
            self._fresh_start()
        elif route is not None:
            raise TargetLacks(Capability.METADATA_FAULTS, (
                f"engine {self.segment} of cluster:{file.path} is attached as it runs "
                f"(lifecycle = \"attach\"); its metadata traffic cannot be routed through "
                f"{route} (a per_test engine whose command line reads ${METADATA_VAR} can be)"))
        if self.wire is not None:
            self._connect()
        else:
            self.pid = self._observed_pid()
        if ttl_ms is not None and self.cache_env is None:
            self.set_ttl_ms(int(ttl_ms))

    def _cache_env(self, ttl_ms: float | None) -> dict[str, str] | None:
        """The environment that bounds a driver engine's cache at ``ttl_ms`` (None: no TTL
        asked, or the engine takes it over its control channel); TargetLacks (engine) where
        the file gives no means."""
        if ttl_ms is None or ENGINE_WIRES[self.entry.protocol].sets_ttl:
            return None
        lacks = cache_ttl_lacks(self.entry, self.file)
        if lacks is not None:  # the deployment's limit (n/a), not a build without a bound
            raise TargetLacks(Capability.ENGINE, (
                f"start_engine(ttl_ms=...): engine {self.segment} of cluster:{self.file.path} "
                f"cannot be given a TTL: {lacks}"))
        return CacheKnobs.of(self.entry.cache_env, self.segment).env_for(float(ttl_ms))

    # ------------------------------------------------------------------ lifecycle

    def _control(self, action: str) -> ComponentControl:
        if self.node is None:
            raise TargetLacks(Capability.ENGINE_RESTART, (
                f"engine {self.segment} of cluster:{self.file.path} links no [[components]] "
                f"entry, so the run cannot {action} it (add component = NAME and the node)"))
        return self.node

    def _start_env(self) -> dict[str, str] | None:
        env = {**(self.cache_env or {}), **({METADATA_VAR: self.route} if self.route else {})}
        return env or None

    def _fresh_start(self) -> None:
        node = self._control("start")
        node.require("kill", "restart")
        if node.state() != "absent":
            node.kill(fault=False)
        node.start(env=self._start_env())

    def _connect(self) -> None:
        """Attach the control wire to the process now behind it (nothing opened yet)."""
        assert self.wire is not None
        self.wire.close()
        self.wire.opened = set()
        try:
            info = self.wire.refresh_info()
        except (ControlError, OSError) as exc:
            raise TargetError(f"engine {self.segment} of cluster:{self.file.path} does not "
                              f"answer on {self.entry.control} ({self.entry.protocol} "
                              f"protocol): {exc}") from None
        if info.get("segment") not in (None, self.segment):
            raise TargetError(f"cluster:{self.file.path}: {self.entry.control} serves segment "
                              f"{info.get('segment')!r}, not {self.segment!r}")
        self.pid = info.get("pid")
        if self.first_pid is None:
            self.first_pid = self.pid

    def _observed_pid(self) -> int | None:
        if self.node is None:
            return None
        pids = self.node.pids()
        return pids[0] if pids else None

    def restart(self, keep_addresses: bool = False) -> None:
        """A new process under the same segment name: kill -9 if it runs, start it again."""
        if keep_addresses:
            raise TargetLacks(Capability.KEEP_ADDRESSES, (
                f"engine {self.segment} of cluster:{self.file.path} is started by its "
                f"component's command line, which fixes where it maps its buffers"))
        node = self._control("restart")
        node.require("kill", "restart")
        node.require("restart", "restart")
        if node.state() != "absent":
            node.kill()
        try:
            node.start(env=self._start_env())
        except TargetError as exc:
            raise EngineRestartFailed(
                f"engine {self.segment} started once but did not come back after a restart "
                f"under the same name: {exc}") from None
        self.took_down = False
        if self.wire is not None:
            self._connect()
        else:
            self.pid = self._observed_pid()

    def kill(self) -> None:
        """SIGKILL its process group on its node: no chance to unpublish."""
        node = self._control("kill")
        if self.wire is not None:
            self.wire.close()
        node.kill()
        self.took_down = True

    def pause(self) -> None:
        """SIGSTOP (beyond ``EngineHandle``): the process holds its sockets and answers nothing."""
        self._control("pause").pause()

    def resume(self) -> None:
        self._control("resume").resume()

    def stop(self) -> None:
        """End of the test: a per-test engine is stopped (its leftover keys removed where the
        file allows metadata writes); an attached one is left running, started again if the
        test left it down."""
        if self.wire is not None:
            self.wire.close()
        if self.entry.lifecycle == "per_test":
            self._stop_own()
        elif self.took_down and self.node is not None:
            self.node.ensure_running()
            self.took_down = False

    def _stop_own(self) -> None:
        node = self._control("stop")
        if node.state() == "absent":
            node.settle("a per-test engine, down at the end of its test")
            return
        if self.wire is not None:
            try:
                self.wire.request_stop()
            except (ControlError, OSError):
                pass
        node.stop(fault=False)
        if not_allowed(self.file, "metadata_writes", None, "", Capability.METADATA_FAULTS):
            return
        for key in (self.metadata.segment_key(self.segment), f"mooncake/rpc_meta/{self.segment}"):
            try:
                if self.metadata.get(key) is not None:
                    self.metadata.delete(key)
            except Exception:  # noqa: BLE001 (an unreachable store: nothing to clean)
                break

    def alive(self) -> bool:
        if self.node is not None:
            try:
                return self.node.running()
            except TargetError:
                return False
        if self.wire is None:
            return False
        try:
            self.wire.refresh_info()
            return True
        except (ControlError, OSError):
            return False

    # ------------------------------------------------------------------ observation

    def buffers(self) -> list[tuple[int, int]]:
        if self.wire is not None:
            return [(int(a), int(n)) for a, n in self.wire.info.get("buffers", [])]
        return [(int(b["addr"]), int(b["length"]))
                for b in self.descriptor().get("buffers", []) if "addr" in b and "length" in b]

    def sockets(self) -> list[Socket]:
        """Its TCP sockets as ``/proc`` on its node shows them (beyond ``EngineHandle``)."""
        return self._control("observe").sockets()

    def logs(self) -> str:
        """Its component's log from this handle's first process on: the file outlives the
        processes, and earlier tests' engines of the same component wrote to it too."""
        if self.node is None:
            return (f"(engine {self.segment} of cluster:{self.file.path} links no component; "
                    f"its log is not reachable)")
        return own_part(self.node.log_or_note(LOG_LINES), self.first_pid)

    def log_events(self) -> Mapping[str, int]:
        """What its log shows, read with the rules of the engine behind its channel."""
        if self.wire is None:
            raise TargetLacks(Capability.ENGINE, (
                f"engine {self.segment} of cluster:{self.file.path} has no control endpoint, "
                f"so the protocol whose log lines to read is unknown"))
        return count_events(self.logs(), self.wire.log_rules)

    # ------------------------------------------------------------------ driving it

    def _driven(self, what: str) -> Any:
        if self.wire is None:
            raise TargetLacks(Capability.ENGINE, (
                f"engine {self.segment} of cluster:{self.file.path} has no control endpoint "
                f"(observed only: descriptor, sockets, log); the run cannot {what}"))
        if what in ("write", "read") and not self.file.permits("transfers"):
            lacks = not_allowed(self.file, "transfers", None, "driving transfers",
                                Capability.ENGINE)
            assert lacks is not None
            raise lacks
        return self.wire

    def register_buffer(self, length: int) -> tuple[int, int]:
        """Another buffer in the running engine, through its control wire (it republishes)."""
        return self._driven("register memory").register_buffer(length)

    def _peer(self, peer: str) -> str:
        """The segment a test's peer name stands for (an alias of the file maps to its
        engine's segment name)."""
        return self.file.segment_name(peer)

    def write(self, peer: str, offset: int, data: bytes) -> TransferResult:
        return self._driven("write").write(self._peer(peer), offset, data)

    def read(self, peer: str, offset: int, length: int) -> TransferResult:
        return self._driven("read").read(self._peer(peer), offset, length)

    def write_at(self, peer: str, address: int, data: bytes) -> TransferResult:
        return self._driven("write").write_at(self._peer(peer), address, data)

    def read_at(self, peer: str, address: int, length: int) -> TransferResult:
        return self._driven("read").read_at(self._peer(peer), address, length)

    def local_read(self, offset: int, length: int) -> bytes:
        return self._driven("read its buffer").local_read(offset, length)

    def local_write(self, offset: int, data: bytes) -> None:
        self._driven("write").local_write(offset, data)

    def lookup(self, peer: str, force: bool = False) -> LookupResult:
        return self._driven("look up a peer").lookup(self._peer(peer), force)

    def set_ttl_ms(self, ttl_ms: int) -> None:
        self._driven("set a TTL").set_ttl_ms(ttl_ms)
        self._ttl_ms = float(ttl_ms)

    @property
    def cache_ttl_ms(self) -> float | None:
        """How long it serves a cached remote descriptor at most: what its start environment
        says (a driver engine), the TTL set over its channel, or None (unknown)."""
        if self.cache_env is not None:
            return bound_ms(self.cache_env)
        return self._ttl_ms

    @property
    def retry_budget(self) -> int | None:
        """What its control wire says (None without one: unknown)."""
        return getattr(self.wire, "retry_budget", None)

    def stats(self) -> Mapping[str, int]:
        return self._driven("read counters").stats()

    def __repr__(self) -> str:
        return f"<DeploymentEngine {self.segment} ({self.entry.lifecycle}) pid={self.pid}>"
