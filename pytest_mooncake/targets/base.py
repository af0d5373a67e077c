"""The Target API: the seam between the conformance suites and an implementation under test.

A suite never touches an implementation directly. It asks the session's ``Target`` for
handles (engines, metadata stores, master clusters, RDMA worker pools) and drives them
through the protocols below. The verdict rule (REQUIREMENTS.md, docs/explanation/verdict-rule.md):

- ``TargetLacks`` (n/a) only where a probe run in this session shows the target has no
  *means* to drive or observe the test (no RDMA device it lets the test control, an admin
  path that answers 404); its reason is that probe's answer, never stored prose.
- A requirement that itself demands an interface (a TTL bound, a promotability predicate,
  counters or log lines, a snapshot that restores what it reports) marks its tests
  ``mc_demands(CAPABILITY)``: there a ``TargetLacks`` of that capability is a FAIL naming
  what is missing, not n/a.
- An observation that breaks (refused connection, 5xx, timeout, an answer of the wrong
  shape) raises ``ObservationFailed``: a FAIL with what was seen, never n/a.
- A target that has the means but behaves wrongly makes the test FAIL.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_mooncake.report.not_applicable import NotApplicable


class Capability(str, enum.Enum):
    """The means a target may have. ``mc_requires`` takes these values."""

    ENGINE = "engine"
    """Start transfer-engine processes under a segment name, write/read peers."""
    ENGINE_RESTART = "engine_restart"
    """Restart an engine under the same segment name (a new process)."""
    KEEP_ADDRESSES = "keep_addresses"
    """Restart so that buffer addresses (and keys) equal the old process's."""
    REGISTER_MEMORY = "register_memory"
    """Register more memory in a running engine, which republishes its descriptor."""
    CACHE_CONTROL = "cache_control"
    """Look up a peer's descriptor the way a transfer would (``lookup``): the whole descriptor,
    or what the build reveals of it (``LookupResult.partial``)."""
    CACHE_TTL = "cache_ttl"
    """Bound how long a remote descriptor is served from cache (``ttl_ms=``): the RFC's
    ``metadata_cache_ttl_ms``, or a real build's own refresh interval (whole seconds; 0: no
    cache). MR-1, MR-3, MR-4, MR-6 and MR-14 demand it."""
    FORCED_REFRESH = "forced_refresh"
    """Refresh one peer's descriptor now, bypassing the TTL (``lookup(force=True)``), as a
    transport failure does. MR-5 demands it."""
    ENGINE_COUNTERS = "engine_counters"
    """Read refresh/replacement/retire/exhaustion counters of an engine."""
    METADATA_ETCD = "metadata_etcd"
    METADATA_HTTP = "metadata_http"
    METADATA_REDIS = "metadata_redis"
    """Engines on ``redis://HOST:PORT`` metadata (Mooncake's Redis plugin)."""
    METADATA_P2P = "metadata_p2p"
    """Engines on ``P2PHANDSHAKE`` metadata: no store; a segment is named ``host:port`` of its
    RPC port and peers ask each other for descriptors there (``--mc-metadata=p2p``)."""
    METADATA_STORE = "metadata_store"
    """A metadata store the test reads, plants and deletes keys in and puts a proxy in front
    of: every backend but P2P handshake, where a deployment lacks it."""
    METADATA_FAULTS = "metadata_faults"
    """Route an engine's metadata traffic through a fault proxy."""
    RDMA_CONTROL = "rdma_control"
    """An RDMA worker pool on a verbs layer the test controls (hold/replay completions)."""
    SCHEDULER = "scheduler"
    """Run the RDMA path under a controlled scheduler (exact interleavings, replay tokens)."""
    RDMA_STATE = "rdma_state"
    """Read the RDMA transport's own state: slices (attempt, retry count), endpoint generations
    and retire causes, rail error/pause state, queued slices, completion tokens."""
    MASTER_CLUSTER = "master_cluster"
    """Start, kill and observe HA masters and store clients."""
    HA_REDIS = "ha_redis"
    """HA masters that elect their leader (and keep their OpLog, where the build keeps one)
    in Redis: ``mooncake_master --ha_backend_type=redis`` (``--mc-ha=redis``)."""
    MASTER_SNAPSHOT = "master_snapshot"
    """Masters that write and restore snapshots."""
    MASTER_FAULT_PLANTING = "master_fault_planting"
    """Plant an invalid entry (e.g. overlapping descriptors) in a standby's replicated state."""
    VERSION_SKEW = "version_skew"
    """Start components of a chosen other version or profile beside this target."""
    CLIENT_VERSION = "client_version"
    """Start store clients that announce a chosen protocol version instead of the build's own
    (``start_client(version=)``, ``store_client(version=)``): MP-8 version-skew runs."""
    PROMOTABILITY = "promotability"
    """A standby's promotability predicate on its admin endpoint (``promotable(i)``): MP-3
    demands it; elsewhere it is a means for sub-checks."""
    MASTER_WIRE = "master_wire"
    """Speak the masters' own RPC with a client the test controls (``MasterClusterHandle.
    wire_client``): its per-call deadline, the protocol revision (release family) it speaks,
    and the version it offers the master: MP-7 and MP-8 judged on the wire."""
    FOREIGN_MASTER = "foreign_master"
    """Attach this target's store clients to a master cluster another target started
    (``Target.store_client(cluster.endpoint())``): mixed master/client pairs of ``mc_skew``."""


class TargetLacks(Exception):
    """Raised by a target asked for something it has no means to do: the test is n/a. It
    carries its ``NotApplicable`` (capability + reason) to the report as it is."""

    def __init__(self, capability: Capability | str, reason: str):
        self.capability = Capability(capability)
        self.reason = reason
        super().__init__(f"{self.capability.value}: {reason}")

    @property
    def not_applicable(self) -> NotApplicable:
        return NotApplicable(self.capability.value, self.reason)


class TargetError(Exception):
    """A target could not start or drive a component (setup problem, not a verdict)."""


class ComponentStartError(TargetError):
    """A component (engine, master, store client) did not start where the target has the means
    to start it: nothing was judged, so the test's verdict is error, with what was seen, even
    when it is raised inside the test body (never FAIL of the requirement, never n/a)."""


class PreconditionUnestablished(TargetError):
    """The harness could not establish what the test needs before judging (e.g. the machine
    was starved of CPU while the build's deadline ran): nothing was judged, so the verdict is
    error with what was seen, even when raised inside the test body (never FAIL, never n/a)."""


class ObservationFailed(AssertionError):
    """Observing the implementation broke: a refused connection, a 5xx, a timeout, an answer of
    an unexpected shape. The test FAILs with what was seen (an ``AssertionError``), never n/a:
    a standby that crashed or answers garbage is a finding, not a missing means."""

    def __init__(self, what: str, seen: str):
        self.what = what
        self.seen = seen
        super().__init__(f"{what}: {seen}")


class NotQuiescent(AssertionError):
    """An RDMA cluster's ``settle()`` reached its deadline: the message says what the target
    left undone (transfers never ended, events never acknowledged, completions never polled,
    what kept moving), an observation of the build the waiting test judges."""


# ---------------------------------------------------------------------------------- handles


@runtime_checkable
class MetadataHandle(Protocol):
    """A metadata store (etcd or an HTTP metadata server) with raw access for planting values."""

    kind: str
    """``"etcd"`` or ``"http"``."""
    uri: str
    """The connection string as Mooncake spells it: ``etcd://h:p`` or ``http://h:p/metadata``."""

    def get(self, key: str) -> bytes | None: ...
    def put(self, key: str, value: bytes) -> None: ...
    def delete(self, key: str) -> bool: ...
    def keys(self, prefix: str = "") -> list[str]: ...
    def segment_key(self, segment: str) -> str:
        """The key a segment descriptor is published under (``mooncake/ram/<segment>``)."""
        ...

    def close(self) -> None:
        """Stop what the handle started (an HTTP metadata server); a no-op for shared etcd."""
        ...

    @property
    def address(self) -> str:
        """``host:port`` the store listens on (what a fault proxy forwards to)."""
        ...

    def through(self, address: str) -> MetadataHandle:
        """The same store reached at ``address`` (a fault proxy in front of it): engines started
        with the returned handle send their metadata traffic through the proxy."""
        ...


@dataclass(frozen=True)
class TransferResult:
    """What one write or read did; ``error`` names the failure in the target's words."""

    ok: bool
    data: bytes | None = None
    error: str | None = None
    retries: int = 0
    """How many times the transfer was retried after a failure (0 where the target cannot
    tell)."""


@dataclass(frozen=True)
class LookupResult:
    """What an engine's metadata lookup of a peer returned: a descriptor or a failure."""

    ok: bool
    descriptor: Mapping[str, Any] | None = None
    error: str | None = None
    partial: bool = False
    """True when the target reveals only part of the cached descriptor (a real build's Python
    API: the first buffer's address); compare with ``planting.shows``."""


@runtime_checkable
class EngineHandle(Protocol):
    """One transfer-engine process publishing one segment."""

    segment: str
    pid: int | None
    cache_ttl_ms: float | None
    """How long this engine serves a remote descriptor from its cache at most, as it runs (a
    real build rounds ``ttl_ms`` up to its whole-second refresh interval); None: no bound."""
    retry_budget: int | None
    """How many times this engine retries a failed transfer at most (MR-12's "existing bounded
    budget"), as it runs; None where the target does not say."""

    def descriptor(self) -> Mapping[str, Any]:
        """The engine's own published descriptor, decoded from the metadata store."""
        ...

    def raw_descriptor(self) -> bytes | None: ...
    def buffers(self) -> list[tuple[int, int]]:
        """(address, length) of each registered buffer."""
        ...

    def register_buffer(self, length: int) -> tuple[int, int]:
        """Register another buffer of ``length`` bytes (Mooncake's ``register_memory``); the
        engine republishes its descriptor. Its (address, length). Needs ``register_memory``."""
        ...

    def write(self, peer: str, offset: int, data: bytes) -> TransferResult:
        """Write ``data`` at ``offset`` into the first buffer of segment ``peer``."""
        ...

    def read(self, peer: str, offset: int, length: int) -> TransferResult: ...
    def write_at(self, peer: str, address: int, data: bytes) -> TransferResult:
        """Write at an absolute remote address (used to probe foreign memory, MR-18)."""
        ...

    def local_read(self, offset: int, length: int) -> bytes:
        """Read this engine's own first buffer (to see what a peer's write left there)."""
        ...

    def local_write(self, offset: int, data: bytes) -> None:
        """Write this engine's own first buffer (so a peer's read has something to find)."""
        ...

    def lookup(self, peer: str, force: bool = False) -> LookupResult:
        """Resolve ``peer``'s descriptor the way a transfer would (cache, TTL, refresh);
        ``force`` asks for a forced refresh (what a transport failure triggers)."""
        ...

    def set_ttl_ms(self, ttl_ms: int) -> None:
        """Change ``metadata_cache_ttl_ms`` of the running engine."""
        ...

    def stats(self) -> Mapping[str, int]:
        """Counters: refresh_ok, refresh_failed, refresh_forced, replacements, legacy_peers,
        endpoints_retired, retries_exhausted, snapshots_replaced, metadata_fetches; where the
        target can observe them, open connections: peer_connections (to peers' data ports),
        peer_connections_stale (of those, to a replaced instance), data_sessions (accepted on
        this engine's data port)."""
        ...

    def logs(self) -> str: ...
    def log_events(self) -> Mapping[str, int]:
        """What the engine's log shows, read as the counters ``stats`` names (an event the log
        never mentions is absent): MR-15's log lines, where a build has no counter API."""
        ...

    def restart(self, keep_addresses: bool = False) -> None: ...
    def kill(self) -> None: ...
    def stop(self) -> None: ...
    def alive(self) -> bool: ...


class StoreClientHandle(Protocol):
    """A store client process; every call returns ``{"ok": bool, "result"|"error": ...}``."""

    def put(self, key: str, size: int = 64) -> Mapping[str, Any]: ...
    def get(self, key: str) -> Mapping[str, Any]: ...
    def exists(self, key: str) -> Mapping[str, Any]: ...
    def remove(self, key: str, force: bool = False) -> Mapping[str, Any]: ...
    def kill(self) -> None: ...
    def stop(self) -> None:
        """Terminate the client process (SIGTERM, then SIGKILL) and free what it held."""
        ...

    def alive(self) -> bool: ...


@runtime_checkable
class WireClientHandle(Protocol):
    """A client of the masters' own RPC that the test drives call by call (no retries, no
    reattach): each call ends within ``timeout`` s and answers ``{ok, error, result}`` like a
    store client, with ``timed_out`` True when the master did not answer in time and
    ``refused`` True when it would not take the call's arguments (another protocol revision).
    Writes are metadata only (the master's allocate and commit); no bytes move."""

    speaks: str
    """The protocol revision (release family) this client speaks."""
    own: str
    """The revision the master speaks, as the probe found it."""
    offered_version: str | None
    """The version this client offered the master, or None where the protocol has no place
    for one (``version_channel`` says what the probe saw)."""
    version_channel: str
    """How a client's version reaches the master, as probed in this run."""
    master_version: str
    """The version the master announced to this client."""

    def put(self, key: str, size: int = 64, timeout: float | None = None) -> Mapping[str, Any]: ...
    def get(self, key: str, timeout: float | None = None) -> Mapping[str, Any]: ...
    def exists(self, key: str, timeout: float | None = None) -> Mapping[str, Any]: ...
    def remove(self, key: str, timeout: float | None = None) -> Mapping[str, Any]: ...
    def ping(self, timeout: float | None = None) -> Mapping[str, Any]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class MasterEndpoint:
    """Where store clients find a master cluster: what a client of *another* target needs to
    attach to it (``MasterClusterHandle.endpoint()`` -> ``Target.store_client(endpoint)``)."""

    protocol: str
    """The RPC protocol its masters speak (``Target.master_protocol`` of the target that started
    them); a client attaches only to masters of its own protocol."""
    etcd: tuple[str, ...]
    """``host:port`` of the etcd the leader is elected on, as this host reaches it."""
    cluster_id: str
    version: str
    """The protocol version its masters announce to clients ("" when they announce none)."""
    build: str
    """The implementation that started them (``Target.version``), for messages."""
    host_reachable: bool = True
    """False when the etcd endpoints are only reachable inside a container network."""
    redis: str | None = None
    """``host:port`` of the Redis the leader is elected on instead (masters on Redis HA)."""
    listeners: tuple[tuple[str, str], ...] = ()
    """Other protocols the leader answers, each on a listener of its own: ``(protocol,
    host:port)`` (a reference master's Mooncake-wire listener). A client speaking one of them
    attaches to that address, without HA discovery."""

    def address_for(self, protocol: str) -> str | None:
        """The leader's listener for ``protocol`` when it is not ``self.protocol``."""
        return dict(self.listeners).get(protocol)


PLANTED_DESCRIPTORS = ("overlap", "unknown_segment", "malformed", "overlap_beside_valid",
                       "unknown_segment_beside_valid", "overlap_on_every_replica",
                       "straddles_segment_end", "past_segment_end", "ends_at_segment_end",
                       "zero_size")
"""The kinds of entry ``MasterClusterHandle.plant_bad_descriptor`` plants: a memory
descriptor overlapping another object's, one on a segment nobody mounted, object metadata
that is malformed (no descriptor to judge at all), an object of two replicas, one valid (on
free memory) and one overlapping another object's or on a segment nobody mounted (MP-2: the
replica goes, not the object), an object of two replicas that both overlap another
object's memory (MP-2: with no valid replica left, the object goes), or a descriptor placed
by the end of the victim's segment (``SEGMENT_END``): starting inside it and running past its
end, starting at its end, or (the one valid kind, the range's edge) ending exactly at it, or
an object of size 0 whose one descriptor, at the victim's address, is 0 bytes long (a size no
put makes and a descriptor Mooncake's restore refuses)."""

SEGMENT_END = ("straddles_segment_end", "past_segment_end", "ends_at_segment_end")
"""The planted kinds whose one descriptor lies by the end of the victim's segment
(``at_segment_end`` says where)."""


def at_segment_end(kind: str, end: int, size: int) -> int:
    """Where a planted descriptor of ``size`` bytes of ``kind`` (``SEGMENT_END``) starts, for a
    segment ending at ``end`` (exclusive): ``end - size`` ("ends_at_segment_end": its last byte
    is the segment's last), half its size before the end ("straddles_segment_end": inside at
    its start, past the end at its end; a one-byte object cannot straddle), or at ``end``
    ("past_segment_end": its first byte is the first past the segment)."""
    return {"ends_at_segment_end": end - size,
            "straddles_segment_end": end - max(1, size // 2),
            "past_segment_end": end}[kind]


def planted_kind(kind: str) -> str:
    """``kind`` when it names a planted descriptor; a ``ValueError`` naming the known ones."""
    if kind not in PLANTED_DESCRIPTORS:
        raise ValueError(f"plant_bad_descriptor: unknown kind {kind!r} (known: "
                         f"{', '.join(PLANTED_DESCRIPTORS)})")
    return kind


class MasterClusterHandle(Protocol):
    """N HA masters and M store clients on one etcd. Masters and clients are named by index.
    A method the target has no means for raises ``TargetLacks`` (the test is n/a).

    Per-master etcd routing: ``Target.master_cluster(..., master_etcd={i: "host:port" or
    [endpoints]})`` starts master ``i`` on those etcd endpoints instead of the cluster's (e.g.
    an ``mc_faults`` proxy, to cut one master's etcd traffic); ``start_master(etcd=...)`` does
    the same for one start and keeps it for later restarts. Clients and the other masters keep
    talking to etcd directly. A target without the means refuses either with ``TargetLacks``
    naming the option; it never ignores it."""

    keys_final_when_serving: bool
    """True where a master lists, from the moment it serves, every object it will ever list
    without new writes (it restores before it serves and adds nothing as clients mount their
    segments again): a test may take its first key list as the list. False where the list can
    still grow (0.3.13 lists an object only once its replica's segment is mounted again, which
    its store client does on a later heartbeat): the test waits for that event."""

    def leader(self, timeout: float = 10.0) -> int:
        """The index of the serving leader, waiting up to ``timeout`` for one."""
        ...

    def standbys(self) -> list[int]: ...
    def start_master(self, index: int | None = None,
                     etcd: str | list[str] | None = None) -> int:
        """Start a new master, or restart master ``index`` on its old ports; ``etcd``: the
        endpoints this master uses instead of the cluster's (per-master etcd routing). A
        cluster on Redis HA takes ``redis="host:port"`` instead (the reference's does)."""
        ...

    def kill_master(self, index: int) -> None:
        """SIGKILL: no lease release, no flush."""
        ...

    def stop_master(self, index: int) -> None:
        """SIGTERM: the master releases its lease and exits; ``start_master(index)`` restarts it."""
        ...

    def pause_master(self, index: int) -> None:
        """SIGSTOP: the master hangs, its connections neither answered nor reset."""
        ...

    def resume_master(self, index: int) -> None:
        """SIGCONT after ``pause_master``."""
        ...

    def leader_view(self) -> Mapping[str, Any]:
        """``{present, leader_address, view_version}`` as a live master reports the election
        (the view version names the leader's term)."""
        ...

    def promotable(self, index: int) -> Mapping[str, Any]:
        """{promotable, reason, validation: {ok, dropped_entries}, applied_seq, primary_seq,
        keys_restorable} as the standby's admin endpoint reports it (MP-3); ``TargetLacks``
        (promotability) where the admin service has no such endpoint, ``ObservationFailed``
        where asking broke."""
        ...

    def replication(self, index: int) -> Mapping[str, Any]:
        """Where master ``index`` stands in the replicated OpLog, from what the build shows:
        {applied_seq, primary_seq (the leader's durable sequence; 0 before any write), lag,
        state, role}."""
        ...

    def promote(self, index: int, timeout: float = 15.0) -> tuple[int, Mapping[str, Any]]:
        """A planned handover to standby ``index``: (HTTP status, body)."""
        ...

    def snapshot(self, index: int) -> Mapping[str, Any]: ...
    def plant_bad_descriptor(self, victim_key: str, key: str = "planted-bad-descriptor",
                             kind: str = "overlap") -> int:
        """Replicate an object whose memory descriptor is invalid, modelled on ``victim_key``'s:
        ``kind`` "overlap" overlaps the victim's buffer, "unknown_segment" lies on a segment no
        client mounted, "malformed" is object metadata no restore can use, "overlap_beside_valid" has
        a second, valid replica beside the overlapping one, "unknown_segment_beside_valid" one
        beside a replica on an unmounted segment, "overlap_on_every_replica" two replicas that
        both overlap the victim's buffer, "straddles_segment_end" one starting inside the victim's
        segment and running past its end, "past_segment_end" one starting at that end,
        "ends_at_segment_end" (valid) one ending exactly at it, "zero_size" an object of size
        0 whose one descriptor is 0 bytes long (``PLANTED_DESCRIPTORS``, ``at_segment_end``).
        Returns the entry's sequence id."""
        ...

    def plant_removal(self, key: str) -> int:
        """Replicate a removal of ``key`` that the leader does not apply (a standby replays
        it): the promotion context then lacks ``key`` without a write through the leader after
        a planted entry. Returns the entry's sequence id; needs ``master_fault_planting``."""
        ...

    def key_count(self, index: int) -> int: ...
    def keys(self, index: int) -> list[str]: ...
    def metrics(self, index: int) -> Mapping[str, float]: ...
    def master_log(self, index: int) -> str: ...
    def start_client(self, client_id: str | None = None, version: str | None = None,
                     wait_attached: bool = True) -> StoreClientHandle: ...
    def client(self, index: int = 0) -> StoreClientHandle: ...
    def wire_client(self, master: int | None = None, speaks: str | None = None,
                    version: str | None = None, timeout: float = 5.0) -> WireClientHandle:
        """A client of master ``master``'s own RPC (default: the leader), speaking revision
        ``speaks`` (default: the master's own, as probed) and offering ``version``; needs
        ``master_wire``. ``TargetLacks`` where the probe finds no revision it can speak."""
        ...

    def wire_revisions(self) -> list[str]:
        """The protocol revisions ``wire_client(speaks=)`` can speak, oldest first."""
        ...

    def endpoint(self) -> MasterEndpoint:
        """Where store clients of another target find these masters (mixed master/client
        pairs); ``TargetLacks`` (foreign_master) where other clients may not attach."""
        ...

    def client_segment(self, index: int) -> str:
        """The segment store client ``index`` mounted (its transport endpoint)."""
        ...

    def replica_segments(self, key: str) -> list[str]: ...
    def replica_descriptors(self, key: str) -> list[list[tuple[str, int, int]]]:
        """The memory the serving leader says ``key``'s readable replicas lie in: one list per
        replica of its memory descriptors, each ``(segment, buffer address, size)`` (the
        segment named as ``replica_segments`` names it); none when ``key`` is absent.
        ``TargetLacks`` (master_cluster) where the build's answer names no buffer address."""
        ...

    def drain_segment(self, segment: str) -> None: ...
    def segment_status(self, segment: str) -> str | None:
        """OK, DRAINING, DRAINED, UNMOUNTING, ... or None once the segment is gone."""
        ...

    def logs(self) -> str: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class RdmaViolation:
    """One broken CO-9 invariant, as an RDMA cluster's ``check()`` reports it."""

    kind: str
    """stale_mutation, double_completion, success_and_failed, stuck_slice, stale_retire,
    post_to_retired, negative_counter, counter_leak, over_capacity (the reference's QP depth or
    CQ outstanding counted past the queue's size), not_reclaimed, token_leak, no_quiescence,
    retry_after_end, actor_crashed."""
    detail: str


class RdmaHandle(Protocol):
    """An RDMA worker pool on a verbs layer under the test's control (``mc_completions``).
    The reference target's ``pytest_mooncake/targets/reference/rdma_handle.py`` documents the API:
    ``scenarios()``, ``run_interleaving(name)``, ``explore(name, ...)``, ``replay(token)`` and
    ``cluster(...)`` for hand-built scenarios (hold/release completions, force retry or
    handoff, error completions, bad_wr, QP-fatal, device-fatal, GID change, peer restart,
    also under new rkeys) and their observations (slices with path/address/rkey, queued
    slices, active and retired endpoints, rail error/pause state per peer NIC path, a node's
    published descriptor, counters).

    A real build's handle (``pytest_mooncake/targets/mooncake/emulated_rdma.py``) gives
    ``cluster(...)`` over engine processes on emulated RDMA devices, with the operations a
    build shows from outside, expressed through each process's verbs control socket: hold,
    fail and release completions, refuse posts, fail QPs, async events, restarts; and what
    the NICs saw (posts with their wr_ids, QPs and their states, retired QPs, what is still
    unreleased, which threads post and poll). What only the reference can show (slice
    attempts, endpoint generations, rail state, controlled schedules) it refuses with
    ``TargetLacks``.

    ``cluster(checked=True)`` is for a test that reads ``check()``. The reference judges CO-9
    from inside, with an invariant checker its engine calls as an observer; every deployed
    engine runs with none, so the reference attaches it only to a checked cluster and otherwise
    runs its engine as deployed (``check()`` of such a cluster raises, it has nothing to
    judge). A real build's ``check()`` reads its NICs from outside whatever ``checked`` says."""

    def scenarios(self) -> list[str]: ...
    def run_interleaving(self, name: str, dedicated_poller: bool = False) -> Any: ...
    def explore(self, name: str, schedules: int | None = None, strategy: str | None = None,
                seed: int | None = None, depth: int | None = None,
                dedicated_poller: bool = False) -> Any: ...
    def replay(self, token: str) -> Any: ...
    def cluster(self, controlled: bool = True, dedicated_poller: bool | str = False,
                checked: bool = False, **config: Any) -> Any: ...
    def close(self) -> None: ...


DEDICATED_POLLER = "MC_RDMA_DEDICATED_POLLER"


def dedicated_poller_env(value: bool | str) -> dict[str, str]:
    """``cluster(dedicated_poller=...)`` as the environment its nodes get: True sets
    ``MC_RDMA_DEDICATED_POLLER=1``, False leaves it unset, a string is set as given (``"0"``:
    the variable is there and says no)."""
    if isinstance(value, str):
        return {DEDICATED_POLLER: value}
    return {DEDICATED_POLLER: "1"} if value else {}


# ---------------------------------------------------------------------------------- target


METADATA_CAPABILITIES = {"etcd": Capability.METADATA_ETCD, "http": Capability.METADATA_HTTP,
                         "http:reference": Capability.METADATA_HTTP,
                         "redis": Capability.METADATA_REDIS, "p2p": Capability.METADATA_P2P}
"""The capability a metadata store of each kind needs."""


@dataclass
class TargetContext:
    """What the plugin hands a target when the session opens it."""

    seed: int
    workdir: Path
    etcd_endpoints: Any = None
    """A callable returning ``list[str]`` of ``host:port``; starts etcd on first use."""
    redis_address: Any = None
    """A callable returning the ``host:port`` of the session Redis; starts it on first use."""
    supervisor: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    bind_host: str = "127.0.0.1"
    """The address the components this target starts listen on and publish: loopback, or
    (a skew role beside a deployment on other machines) this host's address that the
    deployment's nodes reach. Only targets with ``binds_any_host`` are opened with another."""


class Target:
    """An implementation under test. Subclasses are listed in ``targets.KNOWN_TARGETS`` and
    override the factories they support; the defaults raise ``TargetLacks``."""

    kind: str = ""
    capabilities: frozenset[Capability] = frozenset()
    master_protocol: str = ""
    """The RPC protocol this target's masters and store clients speak ("" when it has none):
    a store client of one target attaches to another's masters only when both name the same,
    or the masters answer the client's protocol on a listener of their own."""
    master_listener_protocols: tuple[str, ...] = ()
    """Other protocols its masters answer, each on a listener of their own
    (``MasterEndpoint.listeners``): the reference's masters answer mooncake_master's RPC."""
    verbs_mode: str = "auto"
    """``--mc-verbs`` as ``use_verbs`` last set it."""
    binds_any_host: bool = False
    """Whether it starts its components on ``TargetContext.bind_host`` when that is not
    loopback (else they listen on loopback only)."""

    def __init__(self, variant: str | None = None):
        self.variant = variant
        self.backends: dict[str, str] = {}
        """Backends of this column (``with_backends``), over the session's options."""

    @property
    def label(self) -> str:
        """The matrix column name: ``plain_label``, with ``+metadata=B``/``+ha=B`` for a column
        deployed on backends other than etcd (``with_backends``)."""
        return self.plain_label + "".join(
            f"+{k}={v.replace(':', '-')}" for k, v in sorted(self.backends.items()) if v != "etcd")

    @property
    def plain_label(self) -> str:
        """The target as ``--mc-target`` spells it: ``kind`` or ``kind:variant``."""
        return f"{self.kind}:{self.variant}" if self.variant else self.kind

    def with_backends(self, **backends: str | None) -> Target:
        """Deploy this target on these backends (``metadata``, ``ha``) whatever the session's
        ``--mc-metadata``/``--mc-ha`` say: a matrix column's own choice."""
        self.backends.update({k: v for k, v in backends.items() if v})
        return self

    @property
    def version(self) -> str:
        return "unknown"

    @property
    def protocol_version(self) -> str:
        """The master-protocol version this target's store clients announce ("": none, or
        not known here); what a wire client stands in for them offers (``wire_client``)."""
        return ""

    @property
    def notes(self) -> str:
        """What a report header should say besides the version: libraries supplied here
        instead of the machine's (e.g. ``CUDA: stand-in driver, no device``); "" for none."""
        return ""

    def missing(self, capability: Capability | str) -> str | None:
        """Why this target lacks ``capability``, or None when it has it."""
        cap = Capability(capability)
        if cap in self.capabilities:
            return None
        return self.lack_reason(cap)

    def lack_reason(self, capability: Capability) -> str:
        return f"target {self.label} has no means for {capability.value}"

    def open(self, ctx: TargetContext) -> None:
        """Session start: remember the context; start nothing expensive yet."""
        self.ctx = ctx

    def use_verbs(self, mode: str) -> None:
        """The verbs layer ``--mc-verbs`` chose (``auto``, ``sim``, ``emulated[:DEVICES]``,
        ``host``, ``pyverbs:DEVICE``), given before any capability is asked: a target whose
        RDMA means depend on it overrides this."""
        self.verbs_mode = mode

    def close(self) -> None:
        """Session end: stop and reap everything this target started."""

    # Component factories. Targets override what they support.
    def metadata_store(self, kind: str = "etcd") -> MetadataHandle:
        raise TargetLacks(
            METADATA_CAPABILITIES.get(kind, Capability.METADATA_ETCD),
            f"target {self.label} provides no {kind} metadata store",
        )

    def deployment_backends(self) -> dict[str, str]:
        """The backends this session deploys the target on (``--mc-metadata``, ``--mc-ha``):
        ``{"metadata": "etcd"|"redis"|"http", "ha": "etcd"|"redis"}``; a field of the report
        column's deployment record."""
        options = getattr(getattr(self, "ctx", None), "options", None) or {}
        chosen = {key: options.get(key) or "etcd" for key in ("metadata", "ha")}
        chosen.update(getattr(self, "backends", {}))
        return chosen

    def start_engine(
        self, segment: str, metadata: MetadataHandle, **options: Any
    ) -> EngineHandle:
        raise TargetLacks(Capability.ENGINE, f"target {self.label} cannot start engines")

    def master_cluster(self, masters: int = 2, clients: int = 1, **options: Any) -> MasterClusterHandle:
        raise TargetLacks(
            Capability.MASTER_CLUSTER, f"target {self.label} cannot start master clusters"
        )

    def rdma(self, **options: Any) -> RdmaHandle:
        raise TargetLacks(Capability.RDMA_CONTROL, f"target {self.label} has no controllable RDMA path")

    def store_client_lacks(self, master: MasterEndpoint,
                           version: str | None = None) -> TargetLacks | None:
        """Why this target cannot attach a store client (announcing ``version``, default its
        own) to ``master``, as the ``TargetLacks`` that ``store_client`` would raise; None when
        it can. A test may ask before starting anything."""
        reason = self.missing(Capability.FOREIGN_MASTER)
        if reason:
            return TargetLacks(Capability.FOREIGN_MASTER, reason)
        if not self.master_protocol or (master.protocol != self.master_protocol
                                        and master.address_for(self.master_protocol) is None):
            return TargetLacks(Capability.FOREIGN_MASTER, (
                f"store clients of {self.version} speak no master protocol but their own "
                f"({self.master_protocol or 'none'}); the masters of {master.build} speak "
                f"{master.protocol}"))
        reason = None if version is None else self.missing(Capability.CLIENT_VERSION)
        return TargetLacks(Capability.CLIENT_VERSION, reason) if reason else None

    def store_client(self, master: MasterEndpoint, client_id: str | None = None,
                     version: str | None = None, wait_attached: bool = True) -> StoreClientHandle:
        """A store client of this target attached to ``master``, a cluster another target (or
        this one) started: the client side of a mixed master/client pair. ``version``: the
        protocol version to announce instead of the build's own (needs ``client_version``);
        ``wait_attached``: return only once it attached (a client the master rejects never
        does). The caller stops it (``stop()``); the target stops what is left at ``close()``.
        Raises ``store_client_lacks``'s ``TargetLacks`` where it cannot."""
        raise self.store_client_lacks(master, version) or TargetLacks(
            Capability.FOREIGN_MASTER,
            f"target {self.label} cannot start store clients for another target's masters")

    def describe(self) -> Mapping[str, Any]:
        """Facts for the report header (version, build, capabilities)."""
        return {
            "target": self.label,
            "version": self.version,
            "notes": self.notes,
            "capabilities": sorted(c.value for c in self.capabilities),
        }


def capability_names() -> Iterable[str]:
    return (c.value for c in Capability)
