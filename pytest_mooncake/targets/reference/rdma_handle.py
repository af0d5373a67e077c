"""The reference target's RDMA handle: the reference engine's RDMA path on simulated verbs,
under the controlled scheduler or free-running.

What a suite can do with it (every return value is a plain dataclass or dict of this module;
nothing of reference_engine leaks out, so suites stay target-agnostic):

- ``scenarios()``: names of the RFC testing-plan interleavings.
- ``run_interleaving(name)``: run one by name, pinned to the interleaving the RFC describes,
  and report the CO-9 invariants (``RdmaRun``).
- ``explore(name, schedules, strategy, seed, depth)``: many schedules; the first failing one's
  replay token and violation (``RdmaExploration``). With ``replay=TOKEN`` given at
  construction (``--mc-replay``), ``explore`` runs exactly that schedule.
- ``replay(token)``: run one recorded schedule again (``RdmaRun``).
- ``cluster(...)``: build a scenario by hand (``RdmaCluster``): nodes with NICs, transfers,
  held/released completions, forced retry/handoff, error completions, bad_wr, QP-fatal,
  device-fatal and GID-change events, peer restarts keeping names/addresses/rkeys (or not the
  rkeys), a metadata store refusing reads (``refuse_metadata``); ``settle()`` runs it to
  quiescence; ``check()`` returns the CO-9 violations (of a ``cluster(checked=True)``: below).
  Observations: ``status``, ``slices`` (path, remote address and rkey per slice), ``posts``,
  ``cq_pollers`` (the threads that polled each CQ; free-running clusters), ``cqs`` (each
  CQ's entries, completions waiting, completions lost to an overrun),
  ``queued``, ``endpoints`` (active), ``retired`` (with whether the target-state mutex was
  held), ``rails`` (error/pause state per peer NIC path), ``descriptor`` (what a node
  published), ``counters``, ``token_pool``, ``metadata_refused``.

Observed or as deployed. The CO-9 invariant checker judges a run from inside: the engine calls it
(its ``observer``) at each post, completion effect, retry and retire. Every deployed engine runs
with no observer, and the engine's code differs there (each call is guarded by ``observer is not
None``), so a cluster attaches the checker only when the test reads its judgement:
``cluster(checked=True)`` for a test that calls ``check()``; by default the engine runs as
deployed, unobserved, and ``check()`` refuses (``UncheckedCluster``) rather than judge with
half the checker. What the simulated NICs saw (``posts``, ``qps``, ...) and the engine's own state
read the same either way. Explorations, pinned interleavings and replays are always judged by the
checker (their verdict is its violations).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.targets.base import (
    Capability,
    NotQuiescent,
    RdmaViolation,
    TargetLacks,
    dedicated_poller_env,
)
from reference_engine.rdma.sim import exploration
from reference_engine.rdma.sim.invariants import InvariantChecker
from reference_engine.rdma.sim.scenarios import SCENARIOS
from reference_engine.rdma.sim.scheduler import RoundRobin, ScheduleError, Scheduler
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.sim.sim_verbs import DELAY, ERROR, FAIL_POST, HOLD, Fault
from reference_engine.rdma.slices import STATUS_NAMES
from reference_engine.rdma.verbs import Opcode, WcStatus


@dataclass(frozen=True)
class RdmaRun:
    scenario: str
    profile: str
    violations: list[RdmaViolation]
    steps: int
    token: str
    """Replays this run (seed and strategy parameters)."""
    exact_token: str
    """Replays this run from its recorded choice sequence."""
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass(frozen=True)
class RdmaExploration:
    scenario: str
    profile: str
    schedules_run: int
    failure: RdmaRun | None

    @property
    def found(self) -> bool:
        return self.failure is not None

    @property
    def token(self) -> str | None:
        return self.failure.token if self.failure else None

    @property
    def violation(self) -> RdmaViolation | None:
        return self.failure.violations[0] if self.failure else None


RECLAIM_BOUND = 10.0
"""Seconds ``check()`` gives a free-running cluster to destroy a QP its engine retired once
nothing is outstanding on it (as ``emulated_rdma.RECLAIM_BOUND`` gives a real build)."""


class UncheckedCluster(RuntimeError):
    """``check()`` of a cluster built without ``checked=True``: its engine ran with no observer,
    so the checker saw nothing of the run to judge."""


def _violations(items) -> list[RdmaViolation]:
    return [RdmaViolation(v.kind, v.detail) for v in items]


def _run(outcome) -> RdmaRun:
    return RdmaRun(outcome.scenario, outcome.profile, _violations(outcome.violations),
                   outcome.steps, outcome.token, outcome.exact_token, dict(outcome.stats))


def _wc_status(name: str) -> int:
    try:
        return WcStatus[name.upper()]
    except KeyError:
        raise ValueError(f"unknown completion status {name!r}") from None


class ReferenceRdma:
    """The RDMA handle of ``ReferenceTarget``; one per test (``mc_completions``)."""

    def __init__(self, profile: str = "rfc", seed: int = 0, schedules: int = 200,
                 strategy: str = "mix", replay: str | None = None, verbs: str = "sim",
                 **_: Any):
        self.profile = profile
        self.seed = seed
        self.schedules = schedules
        self.strategy = strategy
        self.replay_token = replay
        self.verbs = verbs
        self._clusters: list[RdmaCluster] = []

    def scenarios(self) -> list[str]:
        return sorted(SCENARIOS)

    def run_interleaving(self, name: str, dedicated_poller: bool = False) -> RdmaRun:
        return _run(exploration.run_once(name, self.profile, RoundRobin(),
                                         dedicated_poller_env(dedicated_poller), pinned=True))

    def explore(self, name: str, schedules: int | None = None, strategy: str | None = None,
                seed: int | None = None, depth: int | None = None,
                dedicated_poller: bool = False) -> RdmaExploration:
        if self.replay_token:
            run = self.replay(self.replay_token)
            return RdmaExploration(run.scenario, run.profile, 1, None if run.ok else run)
        strategy = strategy or self.strategy
        if depth is None and strategy == "pct":
            depth = 3
        result = exploration.explore(
            name, self.profile, schedules or self.schedules, strategy,
            self.seed if seed is None else seed, depth, env=dedicated_poller_env(dedicated_poller))
        return RdmaExploration(name, self.profile, result.schedules,
                               _run(result.failure) if result.failure else None)

    def replay(self, token: str) -> RdmaRun:
        try:
            return _run(exploration.replay(token))
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None

    def schedule_trace(self, token: str) -> str:
        """The schedule ``token`` names, replayed step by step: which actor ran at which
        scheduling point, then the invariants it broke (what a failing test attaches)."""
        try:
            outcome = exploration.replay(token, record_trace=True)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
        lines = [f"{outcome.scenario} ({outcome.profile}), {outcome.steps} steps, "
                 f"replay token {token}"]
        lines += [f"{step:5d}  {actor:<24} {point}"
                  for step, (actor, point) in enumerate(outcome.trace, 1)]
        lines += [f"violation: {v.kind}: {v.detail}" for v in outcome.violations] or \
            ["no violation in this replay"]
        return "\n".join(lines)

    def cluster(self, controlled: bool = True, dedicated_poller: bool | str = False,
                checked: bool = False, **config: Any) -> RdmaCluster:
        """A hand-built scenario. ``config``: RdmaConfig fields (slice_size, num_qp_per_ep,
        workers_per_ctx, max_ep_per_ctx, retry_cnt, destroy_timeout, ...) and
        ``tcp_handshake=True`` (handshakes over loopback sockets in Mooncake's framing).
        ``dedicated_poller``: see ``dedicated_poller_env``. ``checked``: attach the CO-9
        invariant checker to the engines as their observer, for a test that reads ``check()``;
        without it they run with no observer, as deployed (the module's docstring)."""
        config.pop("metadata_refresh_seconds", None)  # let_refresh() forces a refresh here
        c = RdmaCluster(self.profile, controlled, dedicated_poller_env(dedicated_poller),
                        self.seed, config, checked=checked)
        self._clusters.append(c)
        return c

    def close(self) -> None:
        for c in self._clusters:
            c.close()
        self._clusters = []


class RdmaCluster:
    """Simulated nodes and transfers under the test's control. Transfers are named by the id
    ``submit`` returns; slices by their index within the transfer."""

    def __init__(self, profile: str, controlled: bool, env: dict, seed: int, config: dict,
                 checked: bool = False):
        config.setdefault("slice_size", 4096)
        self.checked = checked
        """Whether the engines run with the invariant checker as their observer (``check()``);
        else with none, as deployed."""
        self.checker = InvariantChecker()
        self.sim = SimCluster(profile, controlled=controlled, seed=seed, env=env,
                              observer=self.checker if checked else None, **config)
        # the simulated NICs tell the checker of every WR posted (``posts``) either way: that
        # is the fabric's hook, not the engine's
        self.sim.fabric.observer = self.checker
        self.controlled = controlled
        self.transfers: list = []
        self._started = False
        self._refusing = 0
        self._under_mutex: dict[tuple[int, int], bool] = {}
        """(id of an endpoint store, index in its retire log) -> whether the retiring transport
        held its target-state mutex then (``retired``: MR-13)."""

    # ------------------------------------------------------------------ building
    def add_node(self, name: str, nics: tuple[str, ...] | list[str] = ("mlx5_0",),
                 buffer_len: int = 1 << 20) -> str:
        self.sim.add_node(name, list(nics), buffer_len=buffer_len)
        self._watch_posts(name)
        self._watch_retires()
        if self._started:
            self.sim.peers[name].transport.start()
        return name

    def add_nodes(self, names, nics: tuple[str, ...] | list[str] = ("mlx5_0",),
                  buffer_len: int = 1 << 20) -> list[str]:
        """``add_node`` for each name, in order (a real build's cluster starts them at once)."""
        return [self.add_node(n, nics, buffer_len) for n in names]

    def _watch_posts(self, name: str) -> None:
        """Let the checker map the WRs of ``name``'s (new) transport to slices as the fabric
        posts them; an observed cluster's checker watches every transport already."""
        if not self.checked:
            self.checker.watch_posts(self.sim.peers[name].transport)

    def _watch_retires(self) -> None:
        """Note, for every endpoint a node retires from now on, whether its transport held the
        target-state mutex at that moment. The engine has no observer call for a retire, so
        each endpoint store's ``retire`` is wrapped (once)."""
        for peer in self.sim.peers.values():
            tr = peer.transport
            for ctx in tr.contexts:
                store = ctx.store
                if getattr(store, "_mc_retires_watched", False):
                    continue

                def retire(ep, cause, _orig=store.retire, _store=store, _tr=tr):
                    mutex = getattr(_tr.peers, "mutex", None)
                    held = mutex is not None and mutex.locked()
                    n = len(_store.retire_log)
                    done = _orig(ep, cause)
                    for i in range(n, len(_store.retire_log)):
                        self._under_mutex[(id(_store), i)] = held
                    return done

                store.retire = retire
                store._mc_retires_watched = True

    def write_local(self, node: str, offset: int, data: bytes) -> None:
        self.sim.peers[node].write(offset, data)

    def read(self, node: str, offset: int, length: int) -> bytes:
        return self.sim.peers[node].read(offset, length)

    def submit(self, src: str, dst: str, length: int, src_offset: int = 0,
               dst_offset: int = 0, op: str = "write") -> int:
        a, b = self.sim.peers[src], self.sim.peers[dst]
        opcode = {"write": Opcode.RDMA_WRITE, "read": Opcode.RDMA_READ}.get(op)
        if opcode is None:
            raise ValueError(f"op must be 'write' or 'read', got {op!r}")
        task = a.transport.submit(dst, [(opcode, a.buffer_addr + src_offset, length,
                                         b.buffer_addr + dst_offset)])
        self.checker.track(task.slices)
        self.transfers.append((src, task))
        return len(self.transfers) - 1

    def status(self, transfer: int) -> str:
        """WAITING, COMPLETED or FAILED."""
        return self.transfers[transfer][1].status()

    def slices(self, transfer: int) -> list[dict[str, Any]]:
        """Per slice: status, retry_cnt, attempt, the peer NIC path, remote address and rkey
        it is (or was last) bound to, successes and failures."""
        return [{"status": STATUS_NAMES[s.status], "retry_cnt": s.retry_cnt,
                 "attempt": s.attempt, "peer_nic_path": s.peer_nic_path,
                 "dest_addr": s.dest_addr, "dest_rkey": s.dest_rkey,
                 "successes": s.n_success, "failures": s.n_failed}
                for s in self.transfers[transfer][1].slices]

    def queued(self, node: str) -> int:
        """Slices ``node`` has queued and not yet posted."""
        return self.sim.peers[node].transport.queued()

    def descriptor(self, node: str) -> dict[str, Any]:
        """What ``node``'s current process published: instance_id, its NIC paths (in device
        order) and buffers with one rkey per device."""
        d = self.sim.directory.published[node]
        server = d.rdma_server_name or d.name
        return {"instance_id": d.instance_id,
                "paths": [f"{server}@{dev.name}" for dev in d.devices or ()],
                "buffers": [{"addr": b.addr, "length": b.length, "rkey": list(b.rkey)}
                            for b in d.buffers]}

    def posts(self, transfer: int, index: int = 0, refused: bool = False) -> list[dict[str, int]]:
        """Every work request posted for one slice, in post order: its wr_id and QP number
        (a WR ``post_send`` refused as bad_wr was never posted: ``refused`` adds nothing)."""
        s = self._slice(transfer, index)
        return [{"wr_id": wr_id, "qp_num": qp_num, "nic": self.sim.fabric.qp_nic.get(qp_num)}
                for _, qp_num, wr_id in self.checker.posts.get(s, [])]

    def worker_model(self, node: str) -> str:
        """``shared`` (each worker posts and polls its own shard) or ``dedicated`` (poller)."""
        return self.sim.peers[node].transport.model.name

    def _slice(self, transfer: int, index: int):
        return self.transfers[transfer][1].slices[index]

    # ------------------------------------------------------------------ faults
    def hold(self, transfer: int, index: int = 0, tag: str = "held", times: int = 1,
             stage: str = "completion") -> None:
        """Hold the completion of the slice's next ``times`` posts until ``release(tag)``.
        ``stage`` is for real builds' NICs (completion: the bytes land and the completion
        waits; execution: the WR waits, and so does the completion a flush gives it); the
        simulated fabric holds a WR before it executes either way."""
        s = self._slice(transfer, index)
        self.sim.fabric.inject(Fault(HOLD, local_addr=s.source_addr, tag=tag, times=times))

    def release(self, tag: str = "held", status: str | None = None) -> int:
        """Let the WRs held under ``tag`` complete (with ``status``, a WcStatus name, instead
        of executing when given)."""
        return self.sim.fabric.release(tag, None if status is None else _wc_status(status))

    def held(self, tag: str = "held") -> list[dict[str, Any]]:
        """The WRs held under ``tag``: NIC, QP number and wr_id."""
        return [{"nic": rec.qp.ctx.device_name, "qp": rec.qp.qp_num, "wr_id": rec.wr.wr_id}
                for rec in self.sim.fabric.held.get(tag, [])]

    def inject_error(self, transfer: int, index: int = 0, status: str = "REM_ACCESS_ERR",
                     times: int = 1) -> None:
        """Complete the slice's next post(s) with an error status (a WcStatus name)."""
        s = self._slice(transfer, index)
        self.sim.fabric.inject(Fault(ERROR, local_addr=s.source_addr, status=_wc_status(status),
                                     times=times))

    def fail_post(self, transfer: int, index: int = 0) -> None:
        """Make post_send return this slice's next WR as bad_wr."""
        s = self._slice(transfer, index)
        self.sim.fabric.inject(Fault(FAIL_POST, local_addr=s.source_addr))

    def refuse_metadata(self, reads: int) -> None:
        """The metadata store refuses the next ``reads`` descriptor reads of any node (a cut
        metadata network); ``metadata_refused()`` says how many it has refused since."""
        self.sim.directory.fail_refresh = reads
        self._refusing = reads

    def metadata_refused(self) -> int:
        """Descriptor reads refused since the last ``refuse_metadata``."""
        return self._refusing - self.sim.directory.fail_refresh

    def force_retry(self, transfer: int, index: int = 0, handoff: bool = False) -> None:
        src, task = self.transfers[transfer]
        self.sim.peers[src].transport.force_retry(task.slices[index], handoff=handoff)

    def qp_fatal(self, node: str, peer: str) -> int:
        """QP-fatal on every QP of ``node``'s active endpoints to ``peer``; returns how many."""
        tr = self.sim.peers[node].transport
        qps = [qp for ctx in tr.contexts for ep in ctx.store.endpoints()
               if ep.peer_nic_path.rpartition("@")[0] == peer for qp in ep.qps]
        for qp in qps:
            self.sim.fabric.raise_qp_fatal(qp)
        return len(qps)

    def device_fatal(self, node: str, nic: str) -> None:
        self.sim.fabric.raise_device_fatal(self.sim.peers[node].node.open(nic))

    def gid_change(self, node: str, nic: str, gid: str) -> None:
        self.sim.fabric.change_gid(self.sim.peers[node].node.open(nic), gid)

    def restart_peer(self, name: str, same_instance: bool = False,
                     same_rkeys: bool = True) -> None:
        """A new process under the same segment name, NIC names, GIDs, addresses and rkeys
        (with ``same_rkeys=False`` its buffer is registered under other rkeys)."""
        self.sim.restart_node(name, same_instance=same_instance, same_rkeys=same_rkeys)
        self._watch_posts(name)
        self._watch_retires()
        if self._started:
            self.sim.peers[name].transport.start()

    def refresh(self, node: str, peer: str) -> bool:
        """Force a metadata refresh of ``peer`` on ``node``; False if it failed."""
        return self.sim.peers[node].transport.lookup(peer, True) is not None

    def let_refresh(self, node: str, peer: str) -> None:
        """Have ``node`` refresh ``peer``'s descriptor (here: a forced refresh)."""
        self.refresh(node, peer)

    def republish(self, name: str) -> None:
        """The same process registers one more buffer and publishes its descriptor again."""
        peer = self.sim.peers[name]
        peer.transport.register_buffer(peer.node.memory.alloc(1 << 16), 1 << 16)
        self.sim.directory.publish(peer.transport.local_descriptor())

    def chaos(self, seed: int, fail: float = 0.0, delay_us: int = 0) -> None:
        """Seeded faults on every WR: fails with probability ``fail`` (retry exceeded) and,
        with ``delay_us``, completes after a random number of later deliveries."""
        rng = random.Random(seed)
        self.chaos_off()
        self._chaos = [Fault(ERROR, predicate=lambda wr: rng.random() < fail,
                             status=WcStatus.RETRY_EXC_ERR, times=None)]
        if delay_us:
            self._chaos.append(Fault(DELAY, predicate=lambda wr: rng.random() < 0.5,
                                     delay=1 + rng.randrange(3), times=None))
        for f in self._chaos:
            self.sim.fabric.inject(f)

    def chaos_off(self) -> None:
        for f in getattr(self, "_chaos", []):
            if f in self.sim.fabric.faults:
                self.sim.fabric.faults.remove(f)
        self._chaos = []

    def start(self) -> None:
        """Free-running: start the workers now (controlled: nothing runs before settle)."""
        if not self.controlled and not self._started:
            self.sim.start()
            self._started = True

    # ------------------------------------------------------------------ running
    def settle(self, timeout: float = 30.0, max_steps: int = 20000) -> bool:
        """Run until nothing is left to do (controlled) or every transfer ended (free); True,
        or ``NotQuiescent`` naming the transfers that had not ended."""
        if self.controlled:
            if Scheduler(RoundRobin(), max_steps).run(self.sim.actors()).quiescent:
                return True
            raise NotQuiescent(f"the simulated cluster still had work after {max_steps} "
                               f"scheduler steps: {self._unfinished()}")
        if not self._started:
            self.sim.start()
            self._started = True
        try:
            return wait_until(lambda: all(t.done for _, t in self.transfers), timeout,
                              "every transfer to end", interval=0.001, max_interval=0.001)
        except Timeout:
            raise NotQuiescent(f"the simulated cluster did not come to rest within "
                               f"{timeout:g}s: {self._unfinished()}") from None

    def _unfinished(self) -> str:
        waiting = [f"transfer {i} from {src}" for i, (src, t) in enumerate(self.transfers)
                   if not t.done]
        return (", ".join(waiting) + " had not ended") if waiting else \
            "every transfer ended, workers still had slices or completions to process"

    def check(self) -> list[RdmaViolation]:
        """CO-9 violations seen so far plus those of the end state (call after ``settle``), and,
        as a real build's NICs show it (``emulated_rdma``'s ``check``), every QP the engine
        moved to ERR itself that has nothing outstanding any more and was not destroyed: a
        retired endpoint never reclaimed (CO-7, CO-9). A free-running cluster gets
        ``RECLAIM_BOUND`` seconds to destroy them; a controlled one ran to quiescence.
        Only of a ``cluster(checked=True)``: the checker judges what the engine told it during
        the run, and an unobserved engine told it nothing (``UncheckedCluster``)."""
        if not self.checked:
            raise UncheckedCluster(
                "check() of a cluster whose engines ran with no observer, as deployed: the CO-9 "
                "invariant checker saw nothing of the run to judge. A test that reads check() "
                "builds its cluster with cluster(checked=True)")
        out = _violations(self.checker.check_final(True))
        try:
            if self._unreclaimed() and not self.controlled:
                wait_until(lambda: not self._unreclaimed(), RECLAIM_BOUND,
                           "retired QPs to be destroyed", interval=0.01, max_interval=0.02)
        except Timeout:
            pass
        for node, qp in self._unreclaimed():
            out.append(RdmaViolation("not_reclaimed", (
                f"{node}: QP {qp.qp_num} ({qp.ctx.device_name}) the engine moved to ERR itself "
                f"has nothing outstanding, yet was not destroyed")))
        return out

    def _unreclaimed(self) -> list[tuple[str, Any]]:
        fabric = self.sim.fabric
        with fabric.lock:
            held = {rec.qp for recs in fabric.held.values() for rec in recs}
            out = []
            for name, peer in self.sim.peers.items():
                if not peer.node.alive or peer.transport.defunct:
                    continue
                for ctx in peer.node.contexts.values():
                    for qp in list(ctx.qps):
                        if (qp.app_err and not qp.destroyed and not qp.pending
                                and qp not in held
                                and not any(wc.qp_num == qp.qp_num for wc in qp.cq.entries)):
                            out.append((name, qp))
            return out

    def counters(self, node: str) -> dict[str, int]:
        tr = self.sim.peers[node].transport
        out = dict(tr.stats)
        out["endpoints_retired"] = sum(len(c.store.retire_log) for c in tr.contexts)
        out["cq_outstanding"] = sum(c.cq_outstanding() for c in tr.contexts)
        out["waiting_endpoints"] = sum(len(c.store.waiting) for c in tr.contexts)
        return out

    def cq_pollers(self, node: str) -> dict[str, list[str]]:
        """Per CQ of ``node`` (``NIC/cqN``): the threads that polled it, empty or not, as its
        NIC saw them. Free-running clusters only: a controlled one runs every worker on the
        test's thread (``TargetLacks``)."""
        if self.controlled:
            raise TargetLacks(Capability.RDMA_CONTROL, (
                "cq_pollers() of a controlled cluster: its workers take turns on one thread; "
                "build it with controlled=False"))
        me = self.sim.peers[node].transport
        return {f"{ctx.device_name}/cq{i}": sorted(cq.pollers)
                for ctx in me.contexts for i, (cq, _) in enumerate(ctx.cqs)}

    def cqs(self, node: str) -> list[dict[str, Any]]:
        """``node``'s CQs: name (``NIC/cqN``), NIC, the entries the engine created it with,
        completions waiting in it, completions handed to it (``None``: the simulated CQ does
        not count them) and completions lost to an overrun (the simulated CQ keeps every
        completion, so 0: the engine's CQ budget is what keeps it within its entries)."""
        me = self.sim.peers[node].transport
        return [{"cq": f"{ctx.device_name}/cq{i}", "nic": ctx.device_name, "capacity": cq.cqe,
                 "queued": len(cq.entries), "completions": None, "lost": 0}
                for ctx in me.contexts for i, (cq, _) in enumerate(ctx.cqs)]

    def describe_workers(self, node: str) -> str:
        tr = self.sim.peers[node].transport
        return (f"{tr.model.name} worker model, {self.sim.config.workers_per_ctx} worker(s) per "
                f"context")

    def alive(self, node: str) -> bool:
        return self.sim.peers[node].node.alive

    def unreleased(self, node: str) -> dict[str, int]:
        """What ``node`` has not released: QP depth of its endpoints not yet destroyed and CQ
        outstanding, as the engine counts them; both 0 at quiescence (CO-3, CO-9)."""
        tr = self.sim.peers[node].transport
        depth = sum(d.value for ctx in tr.contexts
                    for ep in ctx.store.endpoints() + list(ctx.store.waiting) for d in ep.depth)
        return {"qp_depth": depth, "cq_outstanding": sum(c.cq_outstanding() for c in tr.contexts)}

    def qps(self, node: str, destroyed: bool = False) -> list[dict[str, Any]]:
        """``node``'s QPs as its NICs see them: number, NIC, peer node, state, WRs posted and
        in flight, whether the engine moved it to ERR itself and WRs posted to it after that;
        with ``destroyed``, also the QPs it destroyed."""
        fabric, me = self.sim.fabric, self.sim.peers[node].node
        live = [qp for ctx in me.contexts.values() for qp in ctx.qps]
        gone = [qp for qp in fabric.destroyed if qp.ctx.node is me] if destroyed else []
        return [{"qp_num": qp.qp_num, "nic": qp.ctx.device_name,
                 "peer": fabric.qp_owner.get(qp.dest_qp_num), "state": qp.state.name.lower(),
                 "posted": qp.posted,
                 "outstanding": getattr(qp, "outstanding_at_destroy", len(qp.pending)),
                 "held": 0, "retired_by_build": qp.app_err,
                 "posted_after_retire": qp.posted_after_retire, "destroyed": qp.destroyed}
                for qp in live + gone]

    def token_pool(self, node: str) -> dict[str, int]:
        """``node``'s per-post completion tokens: how many were ever created (a pool keeps this
        bounded by the posts in flight, not by the posts made) and how many are live now. A
        path without tokens (the slice as wr_id) reports zeros."""
        pool = getattr(self.sim.peers[node].transport.ownership, "tokens", None)
        return {"created": len(pool.tokens) if pool else 0, "live": len(pool.live) if pool else 0}

    def endpoints(self, node: str) -> list[dict[str, Any]]:
        tr = self.sim.peers[node].transport
        return [{"nic": ctx.device_name, "peer_nic_path": ep.peer_nic_path,
                 "generation": ep.generation, "state": ep.state}
                for ctx in tr.contexts for ep in ctx.store.endpoints()]

    def rails(self, node: str) -> dict[str, dict[str, Any]]:
        """``node``'s rail health per peer NIC path it has state for: error count and whether
        the rail is paused now. A path without state is healthy."""
        rails = self.sim.peers[node].transport.rails
        now = rails.clock.now()
        with rails.lock:
            return {path: {"errors": r.error_count, "paused": r.pause_until > now}
                    for path, r in rails.rails.items()}

    def retired(self, node: str) -> list[dict[str, Any]]:
        """Endpoints ``node`` retired: cause, peer NIC path, generation, and whether it held
        its target-state mutex while retiring it (``under_target_mutex``)."""
        tr = self.sim.peers[node].transport
        return [{"cause": c, "peer_nic_path": p, "generation": g,
                 "under_target_mutex": self._under_mutex.get((id(ctx.store), i), False)}
                for ctx in tr.contexts for i, (c, p, g) in enumerate(ctx.store.retire_log)]

    def close(self) -> None:
        self.sim.close()
        self._started = False


__all__ = ["ReferenceRdma", "RdmaCluster", "RdmaRun", "RdmaExploration", "RdmaViolation",
           "UncheckedCluster"]
