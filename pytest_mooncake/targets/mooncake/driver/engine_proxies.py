"""``EngineHandle`` over a driver process running a real ``mooncake.engine.TransferEngine``."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.nodes.proc_sockets import Socket
from pytest_mooncake.runtime.processes import ManagedProcess
from pytest_mooncake.targets.base import (
    Capability,
    ComponentStartError,
    LookupResult,
    MetadataHandle,
    TargetError,
    TargetLacks,
    TransferResult,
)
from pytest_mooncake.targets.log_events import count_events
from pytest_mooncake.targets.mooncake import mooncake_log
from pytest_mooncake.targets.mooncake.cache_knobs import bound_ms
from pytest_mooncake.targets.mooncake.driver.control_channel import (
    ControlClient,
    ControlError,
    b64,
    read_ready_file,
    unb64,
)
from pytest_mooncake.targets.mooncake.launchers import Launcher
from pytest_mooncake.targets.process_sockets import local_sockets

STOP_GRACE = 30.0
"""Seconds a driver gets to exit after ``stop`` (its engine's destructor deletes the keys and
joins the engine's threads; on a loaded machine that took over 10 s) before SIGTERM."""


P2P_URI = "P2PHANDSHAKE"
P2P_PORT_ENV = "MC_MIN_RPC_PORT"


def p2p_port_range(segment: str) -> dict[str, str]:
    """The environment that puts a real engine on P2PHANDSHAKE at ``segment`` (``host:P``):
    Mooncake draws its RPC port and then its TCP data port from ``MC_MIN_RPC_PORT..
    MC_MAX_RPC_PORT``, so the range is ``P..P+2`` (the driver's ``--rpc-port`` starts again
    until the RPC port is ``P``; the data port is one of the other two)."""
    port = int(segment.rpartition(":")[2])
    return {P2P_PORT_ENV: str(port), "MC_MAX_RPC_PORT": str(port + 2)}


class EngineRestartFailed(AssertionError):
    """An engine that started once refused to start again under its name: a verdict on the
    implementation (e.g. 0.3.13 with an HTTP metadata server), not a setup problem."""


class PublishedDescriptor:
    """The descriptor an engine published under its segment name, read from the metadata store
    (what every engine handle of the Mooncake family reports, driven or only observed)."""

    segment: str
    metadata: MetadataHandle

    def raw_descriptor(self) -> bytes | None:
        return self.metadata.get(self.metadata.segment_key(self.segment))

    def descriptor(self) -> Mapping[str, Any]:
        raw = self.raw_descriptor()
        if raw is None:
            raise LookupError(f"no descriptor under {self.metadata.segment_key(self.segment)!r} "
                              f"in {self.metadata.uri}")
        return json.loads(raw)


class DriverCommands(PublishedDescriptor):
    """Observation and transfer commands over a driver's control channel; shared by engines this
    package starts and engines of an existing deployment (the cluster target)."""

    lacks: dict[Capability, str]
    info: dict[str, Any]
    control: ControlClient | None
    cache_ttl_ms: float | None = None
    """The bound on its remote segment cache (``cache_knobs.bound_ms`` of the environment it
    was started with; None: none known)."""
    retry_budget: int | None = None
    """Mooncake's Python API names no retry budget of a transfer: unknown."""

    def buffers(self) -> list[tuple[int, int]]:
        return [(int(a), int(n)) for a, n in self.info.get("buffers", [])]

    opened: set[str]
    """Peers this process has opened (so the engine may hold their descriptor); emptied by
    whoever starts a new process behind the channel."""

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        if self.control is None:
            raise ControlError(f"engine {self.segment!r} was never started")
        if "peer" in args:
            self.opened.add(str(args["peer"]))
        return self.control.call(op, **args)

    @staticmethod
    def _result(reply: Mapping[str, Any]) -> TransferResult:
        data = unb64(reply["data"]) if reply.get("data") is not None else None
        return TransferResult(ok=bool(reply.get("ok")), data=data, error=reply.get("error"))

    def write(self, peer: str, offset: int, data: bytes) -> TransferResult:
        return self._result(self._call("write", peer=peer, offset=offset, data=b64(data)))

    def read(self, peer: str, offset: int, length: int) -> TransferResult:
        return self._result(self._call("read", peer=peer, offset=offset, length=length))

    def write_at(self, peer: str, address: int, data: bytes) -> TransferResult:
        return self._result(self._call("write_at", peer=peer, address=address, data=b64(data)))

    def read_at(self, peer: str, address: int, length: int) -> TransferResult:
        return self._result(self._call("read_at", peer=peer, address=address, length=length))

    def lookup(self, peer: str, force: bool = False) -> LookupResult:
        """The peer's first buffer address as the engine resolves it for a transfer (through
        its cache): all of the cached descriptor the Python API reveals (``partial``). A
        forced lookup of another peer this process never opened is a plain one: nothing of it
        is cached, so the lookup is itself a fetch from the store, which is what force asks."""
        if force and peer not in self.opened and peer != self.segment:
            force = False
        if force:
            raise TargetLacks(Capability.FORCED_REFRESH, self.lacks.get(
                Capability.FORCED_REFRESH, "the engine offers no forced metadata refresh"))
        reply = self._call("lookup", peer=peer)
        if not reply.get("ok"):
            return LookupResult(ok=False, error=reply.get("error"), partial=True)
        addr = int(reply["first_buffer_address"])
        return LookupResult(ok=True, descriptor={"name": peer, "buffers": [{"addr": addr}]},
                            partial=True)

    def set_ttl_ms(self, ttl_ms: int) -> None:
        """A running build cannot change its cache bound: it reads it from its environment at
        start (``start_engine(ttl_ms=)``)."""
        raise TargetLacks(Capability.CACHE_TTL, (
            f"engine {self.segment!r} reads its cache bound from its environment at start; "
            f"start it with ttl_ms= instead (it runs with {self.cache_ttl_ms} ms)"))

    def stats(self) -> Mapping[str, int]:
        raise TargetLacks(Capability.ENGINE_COUNTERS, self.lacks.get(
            Capability.ENGINE_COUNTERS, "the engine exposes no counters"))

    def register_buffer(self, length: int) -> tuple[int, int]:
        """``TransferEngine.register_memory`` of a new mapping in the running engine."""
        if Capability.REGISTER_MEMORY in self.lacks:
            raise TargetLacks(Capability.REGISTER_MEMORY, self.lacks[Capability.REGISTER_MEMORY])
        reply = self._call("register", length=length)
        if not reply.get("ok"):
            raise TargetError(f"engine {self.segment!r}: {reply.get('error')}")
        buffer = [int(reply["address"]), int(reply["length"])]
        self.info.setdefault("buffers", []).append(buffer)
        return buffer[0], buffer[1]

    def log_events(self) -> Mapping[str, int]:
        return count_events(self.logs(), mooncake_log.RULES)

    def driver_stats(self) -> Mapping[str, int]:
        """What the driver itself counted (transfers and lookups it issued and their outcome);
        not engine counters."""
        return self._call("stats")["counts"]

    def submit_transfer(self, peer: str, op: str, offset: int, length: int,
                        local_offset: int = 0) -> dict[str, Any]:
        """An asynchronous ``op`` (write/read) between this engine's buffer at
        ``local_offset`` and ``peer``'s first buffer at ``offset``: ``{"ok", "transfer",
        "local": [address, length]}``; ``transfer_status`` follows it."""
        return self._call("submit", peer=peer, kind=op, offset=offset, length=length,
                          local_offset=local_offset)

    def transfer_status(self, transfers: list[int]) -> dict[str, str]:
        """waiting / completed / failed per transfer id of ``submit_transfer``."""
        return self._call("status", transfers=list(transfers))["status"]

    def register_extra(self, size: int) -> dict[str, Any]:
        """Register one more buffer in the same process (the engine republishes)."""
        return self._call("register_extra", size=size)

    def local_read(self, offset: int, length: int) -> bytes:
        """Bytes of this engine's own registered buffer (read in its process)."""
        reply = self._call("peek", offset=offset, length=length)
        if not reply.get("ok"):
            raise ValueError(reply.get("error"))
        return unb64(reply["data"])

    def local_write(self, offset: int, data: bytes) -> None:
        """Write into this engine's own registered buffer (in its process)."""
        reply = self._call("poke", offset=offset, data=b64(data))
        if not reply.get("ok"):
            raise ValueError(reply.get("error"))


class MooncakeEngine(DriverCommands):
    """One real TransferEngine (tcp) publishing ``segment`` with one registered buffer.

    ``lookup`` asks the engine for the peer's first buffer address (``get_first_buffer_address``,
    which opens the segment through the engine's metadata cache): that address is all the wheel's
    Python API reveals of the cached descriptor. Forced refreshes, TTLs and counters are absent in
    the wheel, so those calls raise ``TargetLacks`` with the reason the target probed (except a
    forced lookup of a peer this process never opened: ``DriverCommands.lookup``)."""

    def __init__(self, launcher: Launcher, workdir: Path,
                 segment: str, metadata: MetadataHandle, lacks: Mapping[Capability, str],
                 buffer_size: int = 1 << 20, fixed_address: int = 0, ready_timeout: float = 30.0,
                 protocol: str = "tcp", devices: str = "", env: Mapping[str, str] | None = None):
        """``protocol``/``devices`` go to ``TransferEngine.initialize`` (``rdma`` with a
        comma-separated device filter); ``env``: extra environment of the process (an emulated
        RDMA fabric's variables, engine knobs such as ``MC_SLICE_SIZE``)."""
        self.launcher = launcher
        self.protocol = protocol
        self.devices = devices
        self.env = dict(env or {})
        if metadata.uri == P2P_URI:
            self.env.update(p2p_port_range(segment))
        self.cache_ttl_ms = bound_ms(launcher.environment(self.env))
        self.segment = segment
        self.metadata = metadata
        self.lacks = dict(lacks)
        self.buffer_size = buffer_size
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", segment)
        self.ready_file = Path(workdir) / f"engine-{safe}.ready"
        self.ready_timeout = ready_timeout
        self.info: dict[str, Any] = {}
        self._control_port = launcher.control_port
        self.process: ManagedProcess | None = None
        self.control: ControlClient | None = None
        self.left_behind: list[str] = []
        self.stop_outcome = ""
        """How the last ``stop`` ended: ``exited`` when the driver exited by itself (the
        engine's destructor ran), else what happened instead (a test of the destructor's
        effects must know whether it ran)."""
        self._asked = False  # ask_to_stop sent the stop command; finish_stop waits for the exit
        self.opened: set[str] = set()
        """Peers this process has opened (so the engine may hold their descriptor)."""
        self._start(address=fixed_address, avoid=0)

    # ------------------------------------------------------------------ lifecycle

    def _argv(self, address: int, avoid: int) -> list[str]:
        segment = ["--segment", self.segment]
        if self.metadata.uri == P2P_URI:  # Mooncake takes the host; the port comes from the range
            host, _, port = self.segment.rpartition(":")
            segment = ["--segment", host, "--rpc-port", port]
        argv = self.launcher.driver_argv(
            "engine", *segment, "--metadata", self.metadata.uri,
            "--ready-file", str(self.ready_file), "--buffer-size", str(self.buffer_size),
            "--control-host", self.launcher.bind_host, "--control-port", str(self._control_port))
        if self.protocol != "tcp":
            argv += ["--protocol", self.protocol, "--devices", self.devices]
        if address:
            argv += ["--address", hex(address)]
        if avoid:
            argv += ["--avoid", hex(avoid)]
        return argv

    def _start(self, address: int, avoid: int) -> None:
        self.opened = set()
        self.ready_file.unlink(missing_ok=True)
        argv = self._argv(address, avoid)
        try:
            if self.process is None:
                self.process = self.launcher.start(
                    f"mooncake-engine-{self.segment}", argv, self.env or None, self._ready,
                    self.ready_timeout, publish=[self._control_port] if self._control_port else [])
            else:
                self.process.argv = argv
                self.process.start()
        except Exception as exc:
            raise ComponentStartError(f"real Mooncake engine {self.segment!r} of "
                                      f"{self.launcher.version} did not start: {exc}") from None
        self.info = read_ready_file(self.ready_file) or {}
        inside = self._control_port or int(self.info["control_port"])
        port = self.launcher.host_port(self.process, inside)
        self.control = ControlClient(self.process, port,
                                     host=self.launcher.host_address(self.process))

    def _ready(self, _: ManagedProcess) -> bool:
        return self.ready_file.exists()

    _ready.__doc__ = "the driver wrote its ready file (engine initialised, buffer registered)"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def sockets(self) -> list[Socket]:
        """Its TCP sockets as ``/proc`` on this host shows them (beyond ``EngineHandle``)."""
        return local_sockets(self.pid if self.alive() else None, self.segment)

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def restart(self, keep_addresses: bool = False) -> None:
        """A new process under the same segment name. With ``keep_addresses`` its buffer is
        mapped at the old address (MAP_FIXED_NOREPLACE); without, never at the old one."""
        old = self.buffers()[0][0] if self.info else 0
        self.kill()
        try:
            self._start(address=old if keep_addresses else 0, avoid=0 if keep_addresses else old)
        except TargetError as exc:
            raise EngineRestartFailed(
                f"engine {self.segment!r} started once but did not come back after a restart "
                f"under the same name: {exc}") from None

    def kill(self) -> None:
        """SIGKILL the driver's process group: the engine gets no chance to unpublish."""
        if self.control is not None:
            self.control.close()
        if self.process is not None:
            self.process.kill(signal.SIGKILL)

    def stop(self) -> None:
        """Ask the driver to exit (the engine's destructor runs), then reap; SIGKILL if stuck.

        Then remove what the engine left in the shared metadata store (its descriptor and RPC
        entry; ``left_behind`` lists them): 0.3.13 merges a stale descriptor into the next
        engine under the same name, so a later test must not inherit this one's."""
        self.ask_to_stop()
        self.finish_stop()

    def ask_to_stop(self) -> None:
        """The first half of ``stop``: send the driver the stop command, return at once (the
        engine's destructor runs meanwhile). ``finish_stop`` waits for the exit, reaps and
        cleans up; between the two, other engines may be asked too, so their destructors run
        side by side (a cluster's ``close``)."""
        self.stop_outcome = "not running"
        self._asked = False
        if self.alive() and self.control is not None:
            try:
                self.control.call("stop")
            except ControlError as exc:
                self.stop_outcome = f"the stop command failed ({exc})"
            self.control.close()
            self._asked = True

    def finish_stop(self, grace: float = STOP_GRACE) -> None:
        """The second half of ``stop`` (after ``ask_to_stop``): wait up to ``grace`` for the
        driver to exit (less when the caller already waited part of ``STOP_GRACE``), SIGTERM
        then SIGKILL what is left, reap, and remove what the engine left in the metadata
        store."""
        if self._asked:
            self._asked = False
            code = self.process.wait_exit(grace)
            if code is not None and self.stop_outcome == "not running":
                self.stop_outcome = "exited" if code == 0 else f"exited with status {code}"
            elif code is None:
                self.stop_outcome = (f"still running {STOP_GRACE:g} s after the stop command; "
                                     f"SIGTERM, then SIGKILL")
        if self.process is not None:
            self.process.terminate()
        self.left_behind = []
        for key in (self.metadata.segment_key(self.segment), f"mooncake/rpc_meta/{self.segment}"):
            try:
                if self.metadata.get(key) is not None:
                    self.left_behind.append(key)
                    self.metadata.delete(key)
            except Exception:  # noqa: BLE001 (a closed or unreachable store: nothing to clean)
                break

    def logs(self) -> str:
        return self.process.log_text() if self.process is not None else ""

    def __repr__(self) -> str:
        return f"<MooncakeEngine {self.segment} pid={self.pid} alive={self.alive()}>"
