"""The RDMA handle of real builds: engine processes on emulated RDMA devices, driven and
observed through each process's verbs control socket (``pytest_mooncake.verbs``).

``cluster()`` gives the same operations the reference handle's clusters have, each expressed
in what a real build shows from outside:

- nodes are real ``TransferEngine`` processes (``driver/mooncake_driver.py engine --protocol rdma``) on one
  emulated fabric per cluster, publishing to the session etcd under unique segment names;
- ``submit`` queues an asynchronous transfer; nothing is posted before ``settle()`` (or
  ``status()``), so ``hold``/``inject_error``/``fail_post`` given before then catch its first
  attempt. A slice is a ``slice_size`` piece of the transfer's local range, found in the
  NIC's post log by its local address;
- "force a retry" fails the QP the slice's outstanding attempt was posted on (QP to ERR and
  ``IBV_EVENT_QP_FATAL``): whether and where the build retries is the build's own choice;
- ``settle()`` issues queued transfers and waits until every transfer ended, or until nothing
  changed on the cluster's NICs for ``SETTLE_QUIET`` seconds while every WR still outstanding
  is one the test keeps back (held, or queued behind one held before execution: RC order):
  a free-running build has no other "quiescent" to offer;
- ``check()`` judges what the NICs and the processes show: a dead process (its exit status and
  the log lines that say why, e.g. a sanitizer or glibc heap report), a transfer that never
  ended, WRs whose completions were never polled, WRs posted to a QP after the build moved it
  to ERR itself, a QP destroyed before its posted work drained, a retired QP never destroyed.

What only the reference can show (slice attempts and retry counts, endpoint generations and
retire causes, rail state, queued slices, forced metadata refresh, a restart under the same
instance) raises ``TargetLacks`` naming what the build lacks.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.targets.base import (
    DEDICATED_POLLER,
    Capability,
    RdmaViolation,
    TargetError,
    TargetLacks,
    dedicated_poller_env,
)
from pytest_mooncake.targets.mooncake.driver.engine_proxies import STOP_GRACE, MooncakeEngine
from pytest_mooncake.targets.mooncake.explored_rdma import SCENARIOS as EXPLORED_SCENARIOS
from pytest_mooncake.targets.mooncake.explored_rdma import BoundaryExplorer, thread_stacks
from pytest_mooncake.targets.mooncake.metadata_stores import EtcdMetadata
from pytest_mooncake.targets.mooncake.quiescence import (
    NodeView,
    NotQuiescent,
    Watch,
    blocked_threads,
    describe,
)
from pytest_mooncake.verbs import EmulatedFabric, ProcessGone, VerbsControl, VerbsControlError
from pytest_mooncake.verbs.control import PostedWr
from pytest_mooncake.verbs.points import SchedulingPoints

START_WORKERS = 8
"""Engines ``add_nodes`` starts at once."""
SETTLE_QUIET = 1.5
"""Seconds without any change on a cluster's NICs (posts, completions, polls, events, transfer
states) after which held work counts as settled."""
EVENT_ACK_BOUND = 10.0
"""Seconds a build gets to acknowledge one injected QP_FATAL before the next is raised."""
RECLAIM_BOUND = 10.0
"""Seconds ``check()`` gives a build to destroy a QP it retired once nothing is outstanding on
it (0.3.13 reclaims once a second)."""
SHUTDOWN_WEDGE = 3.0
"""Seconds an engine's shutdown may wait inside ``ibv_destroy_*`` for an async event to be
acknowledged before ``close`` kills it: the build stopped its event thread before destroying
(0.3.14 with a 4-entry CQ that overran when its QPs' receives flushed: every CO-3 full-CQ test
waited out the 30 s stop grace on both nodes). Nothing is judged after ``close``; an engine
still making progress acks in milliseconds."""
DRAIN_FLOOR_MS = 1000
"""A QP destroyed with WRs still outstanding less than this long after it entered ERR was not
drained: no drain timeout is that short."""
CONFIG_ENV = {
    "slice_size": "MC_SLICE_SIZE", "retry_cnt": "MC_RETRY_CNT",
    "max_ep_per_ctx": "MC_MAX_EP_PER_CTX", "workers_per_ctx": "MC_WORKERS_PER_CTX",
    "num_qp_per_ep": "MC_NUM_QP_PER_EP", "max_wr": "MC_MAX_WR",
    "max_cqe": "MC_MAX_CQE_PER_CTX",
    "rail_pause_seconds": "MC_RDMA_RAIL_PAUSE_SECONDS",
    "metadata_refresh_seconds": "MC_TE_METADATA_REFRESH_INTERVAL_SECONDS",
}
"""``cluster(**config)`` keys a real build takes, as the environment variables it reads."""
LOG_FINDINGS = re.compile(r"(Sanitizer|heap-use-after-free|double free|malloc\(\)|free\(\)|"
                          r"corrupted|Segmentation fault|Aborted|Check failed|^F\d{4} )")
ROUTINE = re.compile(r"Batch Transfer completed|transfer_engine_py.cpp:\d+\] Sync")
_clusters = itertools.count(1)


def _status_text(raw: str) -> str:
    return {"waiting": "WAITING", "completed": "COMPLETED", "failed": "FAILED"}.get(raw, raw)


@dataclass
class Node:
    name: str
    nics: tuple[str, ...]
    engine: MooncakeEngine
    pids: list[int] = field(default_factory=list)  # every process that ran as this node
    ctl: VerbsControl | None = None
    posts: list[PostedWr] = field(default_factory=list)  # the post logs of all its processes
    cursor: int = 0  # post-log entries of the current process already read

    @property
    def pid(self) -> int:
        return self.pids[-1]


@dataclass
class Transfer:
    src: str
    dst: str
    length: int
    src_offset: int
    dst_offset: int
    op: str
    driver_id: int | None = None
    status: str = "QUEUED"
    local: int = 0  # first local address once issued


class MooncakeRdma:
    """The RDMA handle of the mooncake target on an emulated verbs layer."""

    def __init__(self, placement: Any, layer: Any, lacks: Mapping[Capability, str], seed: int,
                 package_dir: str | None = None, schedules: int | None = None,
                 strategy: str | None = None, replay: str | None = None, **_: Any):
        self.placement = placement
        self.layer = layer
        self.lacks = dict(lacks)
        self.seed = seed
        self.package_dir = package_dir
        self._clusters: list[EmulatedRdmaCluster] = []
        self.explorer = BoundaryExplorer(self, schedules, strategy, replay, seed)

    def _lack(self, capability: Capability) -> TargetLacks:
        return TargetLacks(capability, self.lacks.get(capability, "not offered by this build"))

    def _scheduler(self) -> None:
        if Capability.SCHEDULER in self.lacks:
            raise self._lack(Capability.SCHEDULER)

    def scenarios(self) -> list[str]:
        self._scheduler()
        return list(EXPLORED_SCENARIOS)

    def run_interleaving(self, name: str, dedicated_poller: bool = False) -> Any:
        """The RFC's interleaving ``name`` pinned at the verbs boundary (explored_rdma.py)."""
        self._scheduler()
        return self.explorer.pinned(name, dedicated_poller)

    def explore(self, name: str, dedicated_poller: bool = False, **_: Any) -> Any:
        """Schedules of scenario ``name`` at the verbs boundary (explored_rdma.py)."""
        self._scheduler()
        return self.explorer.explore(name, dedicated_poller)

    def replay(self, token: str) -> Any:
        self._scheduler()
        raise TargetLacks(Capability.SCHEDULER, (
            f"{self.placement.version}: a verbs-boundary token replays through explore() of "
            f"its scenario (--mc-replay=TOKEN), which builds the engine pair it ran on"))

    def schedule_trace(self, token: str) -> str:
        return self.explorer.schedule_trace(token)

    def cluster(self, controlled: bool = True, dedicated_poller: bool | str = False,
                checked: bool = False, **config: Any) -> EmulatedRdmaCluster:
        """Engines on a fresh emulated fabric. ``controlled`` and ``checked`` are accepted and
        mean nothing here (a real build always runs free, and its ``check()`` reads the NICs
        from outside, attached to nothing in the engine); ``dedicated_poller``: see
        ``dedicated_poller_env``; ``config``: ``CONFIG_ENV``'s keys, each passed as the
        environment variable the build reads (refused where the build does not read it)."""
        env = dedicated_poller_env(dedicated_poller)
        if env and not self._reads(DEDICATED_POLLER):
            raise TargetLacks(Capability.RDMA_CONTROL, (
                f"cluster(dedicated_poller={dedicated_poller!r}): {self.placement.version} does "
                f"not read {DEDICATED_POLLER} (the name is nowhere in its engine library): it "
                f"has no dedicated-poller opt-in"))
        for key, value in config.items():
            var = CONFIG_ENV.get(key)
            if var is None:
                raise TargetLacks(Capability.RDMA_CONTROL, (
                    f"cluster({key}=...): {self.placement.version} has no setting for {key} "
                    f"(a real build takes {', '.join(sorted(CONFIG_ENV))})"))
            if not self._reads(var):
                raise TargetLacks(Capability.RDMA_CONTROL, (
                    f"cluster({key}=...): {self.placement.version} does not read {var} (the "
                    f"name is nowhere in its engine library)"))
            env[var] = str(int(value) if isinstance(value, float) and value.is_integer()
                           else value)
        env.setdefault("MC_SLICE_SIZE", "4096")  # the reference clusters' slice size
        env.setdefault("MC_FRAGMENT_RATIO", str(int(env["MC_SLICE_SIZE"]) - 1))  # no merging
        c = EmulatedRdmaCluster(self, env, self.seed + len(self._clusters))
        self._clusters.append(c)
        return c

    def _reads(self, var: str) -> bool:
        """Whether the build's engine library names ``var`` (the strings of its ELF file)."""
        if not self.package_dir:
            return True
        engine = Path(self.package_dir) / "engine.so"
        try:
            return var.encode() in engine.read_bytes()
        except OSError:
            return True

    def logs(self) -> str:
        """Every cluster's engine logs (routine lines dropped) and what their NICs counted."""
        return "\n".join(c.logs_text() for c in self._clusters)

    def close(self) -> None:
        while self._clusters:
            self._clusters.pop().close()


class EmulatedRdmaCluster:
    """Real engines on one emulated fabric; nodes and transfers are named as in the reference
    handle's ``RdmaCluster``."""

    def __init__(self, handle: MooncakeRdma, env: Mapping[str, str], seed: int):
        self.handle = handle
        self.placement = handle.placement
        self.knobs = dict(env)
        self.n = next(_clusters)
        run_dir = Path(self.placement.workdir) / f"vf{self.n}"
        try:
            self.fabric: EmulatedFabric = EmulatedFabric.create(
                self.handle.layer.devices, run_dir=run_dir, seed=seed)
        except ValueError:  # a work directory too long for socket paths: a short one in $TMPDIR
            self.fabric = self.handle.layer.fabric(seed)
        self.nodes: dict[str, Node] = {}
        self.transfers: list[Transfer] = []
        self._rules: dict[str, list[tuple[str, int]]] = {}
        self._stirred = False  # an async event was raised since the last settle()
        self._metadata = EtcdMetadata(self.placement.master_etcd())
        self.wrap_launcher: Any = None

    # ------------------------------------------------------------------ building

    @property
    def slice_size(self) -> int:
        return int(self.knobs["MC_SLICE_SIZE"])

    def segment(self, name: str) -> str:
        return f"rdma{os.getpid()}c{self.n}-{name}"

    def add_node(self, name: str, nics: Iterable[str] = ("mlx5_0",),
                 buffer_len: int = 1 << 20) -> str:
        return self.add_nodes([name], nics, buffer_len)[0]

    def add_nodes(self, names: Iterable[str], nics: Iterable[str] = ("mlx5_0",),
                  buffer_len: int = 1 << 20) -> list[str]:
        """Nodes with the same NICs, their engines started side by side (an engine's start-up
        is mostly waiting: its metadata registration, the device opening; 40 peers one after
        another took 17 s). Each is a node as ``add_node`` makes it, in the order named; if one
        fails to start, the ones that did are still the cluster's (``close`` stops them) and
        the first failure is raised."""
        names, nics = list(names), tuple(nics)
        known = {d.name for d in self.fabric.devices}
        unknown = [n for n in nics if n not in known]
        if unknown:
            raise ValueError(f"node(s) {', '.join(names)}: NIC(s) {', '.join(unknown)} are not "
                             f"on this fabric ({', '.join(sorted(known))}; "
                             f"--mc-verbs=emulated:DEVICES)")
        taken = [n for n in names if n in self.nodes or names.count(n) > 1]
        if taken:
            raise ValueError(f"node name(s) {', '.join(sorted(set(taken)))} given twice or "
                             f"already in the cluster ({', '.join(self.nodes) or 'no nodes'})")
        if not names:
            return []
        if len(names) == 1:
            started: list[Node | BaseException] = [self._start_node(names[0], nics, buffer_len)]
        else:
            with ThreadPoolExecutor(max_workers=min(START_WORKERS, len(names)),
                                    thread_name_prefix="mc-rdma-node") as pool:
                futures = [pool.submit(self._start_node, n, nics, buffer_len) for n in names]
                started = [f.exception() or f.result() for f in futures]
        nodes = [x for x in started if isinstance(x, Node)]
        for node in nodes:
            self.nodes[node.name] = node
        for node in nodes:
            self._attach(node)
        failed = [x for x in started if not isinstance(x, Node)]
        if failed:
            raise failed[0]
        return names

    def _start_node(self, name: str, nics: tuple[str, ...], buffer_len: int) -> Node:
        launcher = self.placement.launcher()
        if self.wrap_launcher is not None:  # e.g. engines under memcheck (memcheck.py)
            launcher = self.wrap_launcher(launcher)
        env = self.fabric.apply(launcher.install.env(self.knobs))
        engine = MooncakeEngine(
            launcher, Path(self.placement.workdir), self.segment(name), self._metadata,
            self.handle.lacks, buffer_size=buffer_len, protocol="rdma", devices=",".join(nics),
            env=env, ready_timeout=60.0)
        return Node(name, nics, engine)

    def _attach(self, node: Node) -> None:
        pid = node.engine.pid
        if pid is None:
            raise TargetError(f"engine {node.name} has no process")
        node.pids.append(pid)
        node.cursor = 0
        try:
            node.ctl = self.fabric.control(pid, timeout=30)
        except (TimeoutError, ProcessLookupError) as exc:
            raise TargetError(f"engine {node.name} (pid {pid}) never opened an emulated "
                              f"device: {exc}; its log:\n{node.engine.logs()[-2000:]}") from None

    def _node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise ValueError(f"no node {name!r} (nodes: {', '.join(self.nodes)})") from None

    def _buffer(self, node: Node) -> int:
        return int(node.engine.buffers()[0][0])

    def write_local(self, node: str, offset: int, data: bytes) -> None:
        self._node(node).engine.local_write(offset, data)

    def read(self, node: str, offset: int, length: int) -> bytes:
        return self._node(node).engine.local_read(offset, length)

    def submit(self, src: str, dst: str, length: int, src_offset: int = 0,
               dst_offset: int = 0, op: str = "write") -> int:
        if op not in ("write", "read"):
            raise ValueError(f"op must be 'write' or 'read', got {op!r}")
        self._node(src), self._node(dst)
        self.transfers.append(Transfer(src, dst, length, src_offset, dst_offset, op))
        return len(self.transfers) - 1

    def _flush(self) -> None:
        """Issue the transfers submitted since the last flush, in order."""
        for t in self.transfers:
            if t.status != "QUEUED":
                continue
            node = self._node(t.src)
            reply = node.engine.submit_transfer(self.segment(t.dst), t.op, t.dst_offset,
                                                t.length, t.src_offset)
            if not reply.get("ok"):
                t.status = "FAILED"
                continue
            t.driver_id = int(reply["transfer"])
            t.local = int(reply["local"][0])
            t.status = "WAITING"

    def _poll_status(self) -> None:
        by_node: dict[str, list[Transfer]] = {}
        for t in self.transfers:
            if t.status == "WAITING" and t.driver_id is not None:
                by_node.setdefault(t.src, []).append(t)
        for name, ts in by_node.items():
            engine = self.nodes[name].engine
            if not engine.alive():
                continue
            reply = engine.transfer_status([t.driver_id for t in ts])
            for t in ts:
                t.status = _status_text(reply[str(t.driver_id)])

    def status(self, transfer: int) -> str:
        """WAITING, COMPLETED or FAILED (a transfer not issued yet is issued now)."""
        self._flush()
        self._poll_status()
        return self.transfers[transfer].status

    # ------------------------------------------------------------------ slices and posts

    def _slice_range(self, transfer: int, index: int) -> tuple[int, int]:
        t = self.transfers[transfer]
        ss = self.slice_size
        if index < 0 or index * ss >= t.length:
            raise IndexError(f"transfer {transfer} of {t.length} bytes has no slice {index} "
                             f"(slices of {ss} bytes)")
        base = self._buffer(self._node(t.src)) + t.src_offset
        return base + index * ss, base + min((index + 1) * ss, t.length)

    def _read_posts(self, node: Node) -> list[PostedWr]:
        if node.ctl is not None and node.engine.alive():
            try:
                fresh = node.ctl.posts(since=node.cursor)
            except ProcessGone:
                fresh = []
            if fresh:
                node.cursor = fresh[-1].n
                node.posts.extend(fresh)
        return node.posts

    def posts(self, transfer: int, index: int = 0, refused: bool = False) -> list[dict[str, Any]]:
        """Every WR posted for one slice, in post order: its wr_id, QP, the NIC and the peer
        NIC it went through (their GIDs are not shown: the QP numbers identify the path);
        with ``refused``, also WRs ``ibv_post_send`` returned as bad_wr."""
        t = self.transfers[transfer]
        lo, hi = self._slice_range(transfer, index)
        dst = set(self._node(t.dst).pids)
        out = []
        for p in self._read_posts(self._node(t.src)):
            if lo <= p.laddr < hi and p.peer in dst and (refused or not p.refused):
                out.append({"wr_id": p.wr_id, "qp_num": p.qp, "nic": p.dev, "rkey": p.rkey,
                            "qp_state": p.qp_state, "refused": bool(p.refused), "tid": p.tid})
        return out

    def slices(self, transfer: int) -> list[dict[str, Any]]:
        raise TargetLacks(Capability.RDMA_CONTROL, (
            f"{self.placement.version} shows no slice state (status, retry count, attempt) "
            f"through any interface; its NICs' post log is what a test sees (posts())"))

    # ------------------------------------------------------------------ faults

    def _rule(self, tag: str, node: Node, rule: int) -> None:
        self._rules.setdefault(tag, []).append((node.name, rule))

    def _src_and_dst(self, transfer: int) -> tuple[Node, Node]:
        t = self.transfers[transfer]
        if t.status != "QUEUED":
            raise ValueError(f"transfer {transfer} was already issued: arm holds and faults "
                             f"on it between submit() and settle()")
        return self._node(t.src), self._node(t.dst)

    def hold(self, transfer: int, index: int = 0, tag: str = "held", times: int = 1,
             stage: str = "completion") -> None:
        """Hold the slice's next ``times`` posts until ``release(tag)``. ``completion``: their
        bytes land, their completions wait. ``execution``: the WRs wait unexecuted (their QP's
        send queue behind them), and so does the completion they get, e.g. a flush when the
        QP fails meanwhile."""
        src, dst = self._src_and_dst(transfer)
        where = self._slice_range(transfer, index)
        if stage == "execution":
            self._rule(tag, src, src.ctl.hold(peer=dst.pid, addr_range=where, count=times,
                                              stage="execution"))
        elif stage != "completion":
            raise ValueError(f"stage={stage!r}: completion or execution")
        self._rule(tag, src, src.ctl.hold(peer=dst.pid, addr_range=where, count=times))

    def held(self, tag: str = "held") -> list[dict[str, Any]]:
        """The WRs held under ``tag``: NIC, QP number, wr_id, stage."""
        out = []
        for name, rule in self._rules.get(tag, []):
            node = self.nodes[name]
            try:
                out += [{"nic": h.dev, "qp": h.qp, "wr_id": h.wr_id, "stage": h.stage,
                         "node": name} for h in node.ctl.held() if h.rule == rule]
            except ProcessGone:
                continue
        return out

    def release(self, tag: str = "held", status: str | None = None) -> int:
        """Deliver the completions held under ``tag`` (in the order they were taken), with
        their own status or ``status`` (an ``ibv_wc_status`` name); their rules go."""
        n = 0
        rules = self._rules.pop(tag, [])
        for name, rule in rules:  # first no rule takes anything more
            try:
                self.nodes[name].ctl.unhold(rule)
            except ProcessGone:
                continue  # what a dead process held died with it
        for name, rule in rules:
            node = self.nodes[name]
            try:
                ids = [h.id for h in node.ctl.held() if h.rule == rule]
                if ids:
                    n += node.ctl.release(ids, status=status)
            except ProcessGone:
                continue
        return n

    def inject_error(self, transfer: int, index: int = 0, status: str = "REM_ACCESS_ERR",
                     times: int | None = 1) -> None:
        """The slice's next ``times`` posts (None: all) complete with ``status``, unexecuted."""
        src, dst = self._src_and_dst(transfer)
        src.ctl.hold(peer=dst.pid, addr_range=self._slice_range(transfer, index),
                     count=0 if times is None else times, fail=status.lower())

    def fail_post(self, transfer: int, index: int = 0) -> None:
        """``ibv_post_send`` returns the slice's next WR as bad_wr (ENOMEM, a full queue)."""
        src, dst = self._src_and_dst(transfer)
        src.ctl.refuse(peer=dst.pid, addr_range=self._slice_range(transfer, index))

    def force_retry(self, transfer: int, index: int = 0, handoff: bool = False) -> None:
        """Fail the QP the slice's outstanding attempt was posted on (QP to ERR and
        ``IBV_EVENT_QP_FATAL``); the build decides whether and where to retry. ``handoff``: a
        real build hands a slice to another local NIC when its context fails (device_fatal)."""
        if handoff:
            raise TargetLacks(Capability.RDMA_CONTROL, (
                f"force_retry(handoff=True): {self.placement.version} has no call that hands "
                f"one slice to another local NIC; device_fatal() makes it hand off all"))
        t = self.transfers[transfer]
        src = self._node(t.src)
        lo, hi = self._slice_range(transfer, index)
        qps = {h.qp for h in src.ctl.held() if lo <= h.laddr < hi}
        if not qps:
            posted = self.posts(transfer, index)
            if not posted:
                raise ValueError(f"slice {index} of transfer {transfer} was never posted: "
                                 f"settle() first")
            qps = {posted[-1]["qp_num"]}
        self._fail_qps(src, sorted(qps))

    def _qp_nums_to(self, node: Node, peer: Node) -> list[int]:
        pids = set(peer.pids)
        return [q.qpn for q in node.ctl.counters().qps.values()
                if q.peer in pids and q.state != "err"]

    def qp_fatal(self, node: str, peer: str, await_ack: bool = True) -> int:
        """QP-fatal on every live QP of ``node`` connected to ``peer``; returns how many.
        ``await_ack=False`` raises the events without waiting for the build to acknowledge
        each: for a fault applied by the boundary scheduler's own thread, where the build's
        event thread reads an event only when that scheduler grants it (waiting there could
        only end at the park timeout, and the thread's read would then be no strategy's
        choice)."""
        n, p = self._node(node), self._node(peer)
        return self._fail_qps(n, self._qp_nums_to(n, p), await_ack)

    def _fail_qps(self, node: Node, qps: list[int], await_ack: bool = True) -> int:
        """QP to ERR and IBV_EVENT_QP_FATAL for each of ``qps``, one at a time: the next once
        the build acknowledged the event before (or ``EVENT_ACK_BOUND`` passed). Raised
        together for an endpoint's two QPs, 0.3.10 (under load) acknowledged one and left the
        other unread for 30 s, its transfer never ending, in some runs and not in others: the
        outcome was decided by scheduling, not by the fault the test asked for. (Its event
        thread acks one event, then takes the endpoint's lock, which a thread destroying the
        endpoint's QPs may hold while ibv_destroy_qp waits for the other event's ack.) A QP the
        build destroyed or moved to ERR itself after an earlier event is not live any more and
        is skipped. Returns how many QPs got the event. ``await_ack=False``: no wait for the
        acknowledgements (``qp_fatal``)."""
        self._stirred = True
        raised = 0
        for qp in qps:
            counters = node.ctl.counters()
            if qp not in counters.qps or counters.qps[qp].state == "err":
                continue  # the build retired it after the event before: its own reaction
            acked = counters.acked
            try:
                node.ctl.fail_qp(qp)
            except VerbsControlError:
                if qp not in node.ctl.counters().qps:
                    continue  # destroyed by the build between the look and the fault
                raise
            raised += 1
            if not await_ack:
                continue
            try:
                wait_until(lambda a=acked: node.ctl.counters().acked > a, EVENT_ACK_BOUND,
                           f"{node.name} to acknowledge QP {qp}'s QP_FATAL", interval=0.01,
                           max_interval=0.05, ignore=(VerbsControlError,))
            except Timeout:
                continue  # unacknowledged: settle() names it, as what the build did
        return raised

    def device_fatal(self, node: str, nic: str) -> None:
        self._stirred = True
        self._node(node).ctl.inject("device_fatal", device=nic)

    def gid_change(self, node: str, nic: str, gid: str) -> None:
        """A new GID in the table entry the build uses (its log names the index it picked;
        3, the IPv4-mapped RoCE v2 entry, if it does not), host-wide, and GID_CHANGE."""
        n = self._node(node)
        found = re.findall(rf"gid index: (\d+) on {re.escape(nic)}/", n.engine.logs())
        index = int(found[-1]) if found else 3
        self._stirred = True
        n.ctl.inject("gid_change", device=nic, gid=gid if ":" in gid else None, index=index)

    def port_down(self, node: str, nic: str) -> None:
        self._stirred = True
        self._node(node).ctl.port_down(nic)

    def restart_peer(self, name: str, same_instance: bool = False,
                     same_rkeys: bool = True) -> None:
        """SIGKILL the node's process and start a new one under the same segment name, NIC
        names and buffer address (its rkeys are whatever the new registration gets)."""
        if same_instance:
            raise TargetLacks(Capability.ENGINE_RESTART, (
                f"{self.placement.version}: a restarted process is a new instance; "
                f"republish() is the same process publishing again"))
        node = self._node(name)
        node.engine.restart(keep_addresses=True)
        self._attach(node)

    def kill(self, name: str) -> None:
        self._node(name).engine.kill()

    def refuse_metadata(self, reads: int) -> None:
        """Not here: the nodes read their descriptors from etcd directly."""
        raise TargetLacks(Capability.METADATA_FAULTS, (
            f"the {self.placement.version} nodes of this emulated RDMA cluster read peers' "
            f"descriptors from etcd at {', '.join(self.placement.master_etcd())} directly: no "
            f"fault proxy stands between them to refuse reads"))

    def republish(self, name: str) -> None:
        """The same process registers one more buffer: it publishes its descriptor again."""
        reply = self._node(name).engine.register_extra(1 << 16)
        if not reply.get("ok"):
            raise TargetError(f"{name}: {reply.get('error')}")

    def refresh(self, node: str, peer: str) -> bool:
        raise TargetLacks(Capability.CACHE_CONTROL, self.handle.lacks.get(
            Capability.CACHE_CONTROL, f"{self.placement.version} has no forced refresh"))

    def let_refresh(self, node: str, peer: str) -> None:
        """Give ``node`` the time to refresh ``peer``'s descriptor on its own: two and a half
        periods of the periodic refresh the cluster enabled (``metadata_refresh_seconds``).
        Nothing outside the process shows when it refreshed, so this is an observation window,
        with transfers from ``node`` to ``peer`` running through it."""
        period = self.knobs.get("MC_TE_METADATA_REFRESH_INTERVAL_SECONDS")
        if not period:
            raise TargetLacks(Capability.CACHE_CONTROL, (
                f"{self.handle.lacks.get(Capability.CACHE_CONTROL, 'no forced refresh')}; "
                f"build the cluster with metadata_refresh_seconds=N for its periodic refresh"))
        self._node(node), self._node(peer)
        end = time.monotonic() + 2.5 * float(period)
        offset = 0
        while time.monotonic() < end:
            t = self.submit(node, peer, self.slice_size, src_offset=offset, dst_offset=offset)
            try:
                self.settle(timeout=max(5.0, 2.5 * float(period)))
            except NotQuiescent:
                break
            offset = (offset + self.slice_size) % (1 << 16)
            if self.status(t) != "COMPLETED":
                break

    def chaos(self, seed: int, fail: float = 0.0, delay_us: int = 0) -> None:
        """Seeded faults on every node's NIC: each WR waits a random 0..delay_us before it
        executes (order per QP kept) and fails with probability ``fail`` (retry exceeded)."""
        for i, node in enumerate(self.nodes.values()):
            node.ctl.chaos(seed + i, delay_us=delay_us, fail=fail)

    def chaos_off(self) -> None:
        for node in self.nodes.values():
            try:
                node.ctl.chaos_off()
            except ProcessGone:
                pass

    # ------------------------------------------------------------------ observing

    def alive(self, node: str) -> bool:
        return self._node(node).engine.alive()

    def logs(self, node: str) -> str:
        return self._node(node).engine.logs()

    def _peer_name(self, pid: int) -> str | None:
        for node in self.nodes.values():
            if pid in node.pids:
                return node.name
        return None

    def logs_text(self, lines: int = 60) -> str:
        out = []
        for node in self.nodes.values():
            text = [ln for ln in node.engine.logs().splitlines() if not ROUTINE.search(ln)]
            state = "alive" if node.engine.alive() else "dead"
            out.append(f"== node {node.name}: segment {node.engine.segment}, pids "
                       f"{node.pids} ({state}), NICs {','.join(node.nics)}")
            if node.engine.alive() and node.ctl is not None:
                try:
                    c = node.ctl.counters()
                    out.append(f"   NIC totals: posted {c.posted}, completed {c.completed}, "
                               f"outstanding {c.outstanding}, held {c.held}, events "
                               f"{c.events}/{c.acked} acked")
                except VerbsControlError:
                    pass
            out += text[-lines:]
        return "\n".join(out)

    def qps(self, node: str, destroyed: bool = False) -> list[dict[str, Any]]:
        """``node``'s QPs as its NICs see them: number, NIC, peer node, state, WRs posted and
        still outstanding (not retired by a polled completion), held, whether the build moved
        it to ERR itself and WRs posted to it after that; with ``destroyed``, also the QPs it
        destroyed (``outstanding`` then is what was outstanding at destruction)."""
        n = self._node(node)
        out = []
        for q in n.ctl.counters().qps.values():
            out.append({"qp_num": q.qpn, "nic": q.dev, "peer": self._peer_name(q.peer),
                        "state": q.state, "posted": q.posted, "outstanding": q.outstanding,
                        "held": q.held, "retired_by_build": bool(q.app_err),
                        "posted_after_retire": q.posted_after_retire, "destroyed": False})
        if destroyed:
            for r in n.ctl.retired():
                out.append({"qp_num": r.qpn, "nic": r.dev, "peer": self._peer_name(r.peer),
                            "state": r.state, "posted": r.posted, "outstanding": r.outstanding,
                            "held": r.held, "retired_by_build": bool(r.app_err),
                            "posted_after_retire": r.posted_after_retire, "destroyed": True,
                            "ms_in_err_before_destroy": r.err_ms_before})
        return out

    def unreleased(self, node: str) -> dict[str, int]:
        """What the build has not released on ``node``'s NICs: send-queue slots of WRs whose
        completions it has not polled (held ones excluded) and completions waiting in its CQs.
        Both must be 0 at quiescence (CO-3, CO-9)."""
        c = self._node(node).ctl.counters()
        return {"qp_depth": sum(max(q.outstanding - q.held, 0) for q in c.qps.values()),
                "cq_queued": sum(cq.queued for cq in c.cqs.values())}

    def cqs(self, node: str) -> list[dict[str, Any]]:
        """``node``'s CQs as its NICs see them: name (``NIC/cqID``), NIC, the entries the build
        created it with, completions waiting in it, completions handed to it (those it held and
        those lost) and completions lost because it was full when they came (an overrun: the NIC
        drops them and raises IBV_EVENT_CQ_ERR, as hardware does)."""
        return [{"cq": f"{cq.dev}/cq{cq.id}", "nic": cq.dev, "capacity": cq.capacity,
                 "queued": cq.queued, "completions": cq.pushed + cq.overruns,
                 "lost": cq.overruns}
                for cq in sorted(self._node(node).ctl.counters().cqs.values(), key=lambda c: c.id)]

    def counters(self, node: str) -> dict[str, int]:
        c = self._node(node).ctl.counters()
        return {"posted": c.posted, "completed": c.completed, "outstanding": c.outstanding,
                "held": c.held, "cqes": c.cqes, "polled": c.polled, "events": c.events,
                "acked": c.acked}

    def worker_model(self, node: str) -> str:
        """From the threads that posted WRs and polled completions: ``shared`` (every thread
        that posts also polls), ``dedicated`` (threads that post never poll, a thread that
        polls never posts), ``mixed`` otherwise; ``unknown`` before any post."""
        threads = self._node(node).ctl.threads()
        posters = [t for t in threads if t.posted]
        pollers = [t for t in threads if t.polled or t.polls]
        if not posters:
            return "unknown"
        if all(t.polls for t in posters):
            return "shared"
        if any(not t.posted for t in pollers):
            return "dedicated"
        return "mixed"

    def cq_pollers(self, node: str) -> dict[str, list[str]]:
        """Per CQ of ``node`` (``NIC/cqID``): the threads (``name/tid``) that called
        ``ibv_poll_cq`` on it, empty polls included."""
        n = self._node(node)
        devs = {cq.id: cq.dev for cq in n.ctl.counters().cqs.values()}
        out: dict[str, list[str]] = {f"{dev}/cq{i}": [] for i, dev in devs.items()}
        for t in n.ctl.threads():
            for cq in t.cqs:  # a CQ destroyed since is named by its id alone
                out.setdefault(f"{devs.get(cq, '?')}/cq{cq}", []).append(f"{t.name}/{t.tid}")
        return out

    def describe_workers(self, node: str) -> str:
        """The threads of ``node`` that posted or polled, as one line for messages."""
        parts = [f"thread {t.tid} posted {t.posted} WR(s), polled {t.polled} completion(s) "
                 f"in {t.polls} poll(s)" for t in self._node(node).ctl.threads()
                 if t.posted or t.polls]
        return "; ".join(parts) or "no thread posted or polled"

    def start(self) -> None:
        """Issue the transfers submitted so far (they run while the test goes on)."""
        self._flush()

    # ------------------------------------------------------------------ running

    def _read(self) -> list[tuple[Node, Any]]:
        """Each node with its NICs' counters now, or "dead"/"gone" (one request per node:
        a poll of ``settle`` judges rest and motion from the same reading)."""
        out: list[tuple[Node, Any]] = []
        for node in self.nodes.values():
            if not node.engine.alive():
                out.append((node, "dead"))
                continue
            try:
                out.append((node, node.ctl.counters()))
            except ProcessGone:
                out.append((node, "gone"))
        return out

    def _snapshot(self, read: list[tuple[Node, Any]]) -> tuple:
        parts: list[Any] = [tuple(t.status for t in self.transfers)]
        for node, c in read:
            if isinstance(c, str):
                parts.append((node.name, c))
                continue
            parts.append((node.name, c.posted, c.completed, c.polled, c.held, c.events,
                          c.acked, c.cqes, tuple(sorted((q.qpn, q.state) for q in c.qps.values()))))
        return tuple(parts)

    def _views(self, read: list[tuple[Node, Any]] | None = None) -> list[NodeView]:
        """Every node's NICs now: counters, and what is outstanding that the test does not
        keep back (held, or queued behind an execution-stage hold: RC order)."""
        out = []
        for node, c in self._read() if read is None else read:
            if isinstance(c, str):
                out.append(NodeView(node.name, False))
                continue
            try:
                out.append(NodeView.of(node.name, c, node.ctl.kept_back(c)))
            except ProcessGone:
                out.append(NodeView(node.name, False))
        return out

    def _nics_idle(self) -> bool:
        return not any(v.busy for v in self._views())

    def settle(self, timeout: float = 30.0, max_steps: int = 0) -> bool:
        """Issue queued transfers; wait until every transfer ended and every NIC is idle, or
        until nothing changed for ``SETTLE_QUIET`` s with only held work outstanding. After an
        async event (QP or device fatal, GID change, port down) the quiet period is always
        waited for: a build acks an event before it acts on it (0.3.14 acks GID_CHANGE, then
        disconnects its endpoints), so idle NICs and ended transfers do not yet mean it acted;
        its QPs' states are part of what must stay unchanged. True once at rest; at the
        deadline ``NotQuiescent`` says what the build was still doing (transfers it never
        ended, events it never acknowledged, completions it never polled, what kept moving)."""
        self._flush()
        last = [None, time.monotonic()]
        stirred = self._stirred
        watch = Watch()

        def orphaned(views: list) -> None:
            """A transfer whose initiator died never ends, and with nothing held nothing else
            ends the wait before its deadline: stop now, naming the dead initiator."""
            lost = [(i, t) for i, t in enumerate(self.transfers) if t.status == "WAITING"
                    and not self.nodes[t.src].engine.alive()]
            if lost and not any(v.kept for v in views):
                raise NotQuiescent("; ".join(
                    f"transfer {i} ({t.op} {t.length} bytes {t.src}->{t.dst}) had not ended and "
                    f"never can: its initiator {self._death(self.nodes[t.src])}"
                    for i, t in lost) + " (settle stopped before its deadline)")

        def settled() -> bool:
            self._poll_status()
            read = self._read()
            views = self._views(read)
            watch.see(views)
            orphaned(views)
            idle = not any(v.busy for v in views)
            ended = all(t.status != "WAITING" for t in self.transfers)
            if idle and not stirred and ended:
                return True
            snap = self._snapshot(read)
            now = time.monotonic()
            if snap != last[0]:
                last[0], last[1] = snap, now
                return False
            # quiet NICs end the wait only where the test keeps work back: a transfer still
            # waiting with nothing held is the build's to end (a timer of its own may be
            # running: a retry backoff, a context re-activated once a second)
            held = any(v.kept for v in views)
            return idle and (ended or held) and now - last[1] >= SETTLE_QUIET

        try:
            wait_until(settled, timeout, "the cluster to settle", interval=0.02,
                       max_interval=0.1)
        except Timeout:
            waiting = [f"{i} ({t.op} {t.length} bytes {t.src}->{t.dst})"
                       for i, t in enumerate(self.transfers) if t.status == "WAITING"]
            dead = [self._death(n) for n in self.nodes.values() if not n.engine.alive()]
            stuck = {v.name: blocked_threads(thread_stacks(self.nodes[v.name].pid))
                     for v in watch.last.values() if v.alive and v.busy}
            raise NotQuiescent(describe(timeout, time.monotonic() - last[1], SETTLE_QUIET,
                                        waiting, dead, watch, stuck)) from None
        self._stirred = False
        return True

    def check(self, wedged: str = "") -> list[RdmaViolation]:
        """The CO-9 invariants a real build shows from outside (call after ``settle``).
        ``wedged``: a destroy no ack releases keeps a transfer WAITING (the caller says so in
        its stuck_slice): no reclaim is waited for, since the destroy is what is stuck."""
        out: list[RdmaViolation] = []
        for node in self.nodes.values():
            if not node.engine.alive():
                out.append(RdmaViolation("actor_crashed", self._death(node)))
        self._poll_status()
        for i, t in enumerate(self.transfers):
            if t.status == "WAITING":
                out.append(RdmaViolation("stuck_slice", (
                    f"transfer {i} ({t.op} {t.length} bytes {t.src}->{t.dst}) never ended")))
        live = [n for n in self.nodes.values() if n.engine.alive()]
        try:
            if wedged:
                raise Timeout("a wedged destroy reclaims nothing")
            # polled every 20 ms, not with wait_until's doubling back-off up to 0.2 s: the
            # build destroys a retired QP on a timer of its own, and every schedule of an
            # exploration waits here for it (the condition, and so the verdict, is the same)
            wait_until(lambda: not self._unreclaimed(live), RECLAIM_BOUND,
                       "retired QPs to be destroyed", interval=0.01, max_interval=0.02)
        except Timeout:
            for node, qp in self._unreclaimed(live):
                out.append(RdmaViolation("not_reclaimed", (
                    f"{node.name}: QP {qp.qpn} ({qp.dev}) the build moved to ERR itself has "
                    f"nothing outstanding, yet was not destroyed within {RECLAIM_BOUND:g}s")))
        for node in live:
            try:
                c = node.ctl.counters()
                kept = node.ctl.kept_back(c)
                retired = node.ctl.retired()
            except ProcessGone:
                continue
            if c.held:
                out.append(RdmaViolation("no_quiescence", (
                    f"{node.name}: {c.held} completion(s) still held by the test")))
            for q in c.qps.values():
                if q.outstanding > kept[q.qpn]:
                    out.append(RdmaViolation("counter_leak", (
                        f"{node.name}: QP {q.qpn} ({q.dev}, {q.state}) has "
                        f"{q.outstanding - kept[q.qpn]} WR(s) whose completions the build "
                        f"never polled")))
            for cq in c.cqs.values():
                if cq.queued:
                    out.append(RdmaViolation("counter_leak", (
                        f"{node.name}: CQ {cq.id} ({cq.dev}) holds {cq.queued} completion(s) "
                        f"the build never polled")))
            for q in list(c.qps.values()) + retired:
                if q.posted_after_retire:
                    out.append(RdmaViolation("post_to_retired", (
                        f"{node.name}: {q.posted_after_retire} WR(s) posted to QP "
                        f"{getattr(q, 'qpn', '?')} after the build had moved it to ERR itself")))
            for r in retired:
                if r.outstanding > r.held and 0 <= r.err_ms_before < DRAIN_FLOOR_MS:
                    out.append(RdmaViolation("destroyed_before_drain", (
                        f"{node.name}: QP {r.qpn} ({r.dev}) destroyed {r.err_ms_before} ms "
                        f"after entering ERR with {r.outstanding - r.held} WR(s) outstanding")))
        return out

    def _unreclaimed(self, nodes: list[Node]) -> list[tuple[Node, Any]]:
        out = []
        for node in nodes:
            try:
                qps = node.ctl.counters().qps.values()
            except (ProcessGone, VerbsControlError):
                continue
            out += [(node, q) for q in qps
                    if q.state == "err" and q.app_err and q.outstanding == 0 and not q.held]
        return out

    def _death(self, node: Node) -> str:
        rc = node.engine.process.returncode if node.engine.process else None
        how = (f"killed by {signal.Signals(-rc).name}" if rc is not None and rc < 0
               else f"exit status {rc}")
        lines = [ln for ln in node.engine.logs().splitlines() if LOG_FINDINGS.search(ln)]
        said = ("; its log says: " + " | ".join(lines[-5:])) if lines else ""
        return f"{node.name} (pid {node.pid}) died: {how}{said}"

    @staticmethod
    def _kill_if_wedged_at_shutdown(node: Node) -> float:
        """Wait for ``node``'s engine to exit as ``finish_stop`` would, but kill it once its
        shutdown has waited ``SHUTDOWN_WEDGE`` s in a destroy for an event no thread will
        acknowledge (its verbs control lists the wait); ``stop_outcome`` says so. Returns what
        is left of ``STOP_GRACE`` for ``finish_stop`` (none once this waited it out)."""
        if node.ctl is None:
            return STOP_GRACE
        points = SchedulingPoints(node.ctl)
        seen: list[str] = []

        def exited_or_wedged() -> bool:
            if not node.engine.alive():
                return True
            try:
                waits = points.state().ack_waits
            except (ProcessGone, VerbsControlError, OSError):
                return not node.engine.alive()
            stuck = [w for w in waits if w.waited_us >= SHUTDOWN_WEDGE * 1e6]
            if stuck:
                seen[:] = [w.describe() for w in stuck]
            return bool(stuck)

        try:
            wait_until(exited_or_wedged, STOP_GRACE, f"{node.name}'s engine to exit",
                       interval=0.05, max_interval=0.25)
        except Timeout:
            return 0.0  # finish_stop says it was still running, and kills it
        if seen and node.engine.alive():
            node.engine.stop_outcome = f"wedged at shutdown ({'; '.join(seen)}); killed"
            node.engine.kill()
        return STOP_GRACE  # exited or killed: finish_stop's wait ends at once

    def close(self) -> None:
        """Stop every node: all are asked first, so their engines' destructors (about a second
        each on 0.3.13) run side by side, then each is waited for, reaped and cleaned up."""
        asked = []
        for node in self.nodes.values():
            try:
                node.engine.ask_to_stop()
                asked.append(node)
            except Exception:  # noqa: BLE001 (stop what can be stopped; the supervisor reaps)
                node.engine.kill()
        for node in asked:
            try:
                node.engine.finish_stop(self._kill_if_wedged_at_shutdown(node))
            except Exception:  # noqa: BLE001 (as above)
                node.engine.kill()
        for node in self.nodes.values():
            if node.ctl is not None:
                node.ctl.close()
        self.nodes.clear()
        self.fabric.close()
