"""The RFC's testing-plan interleavings as named scenarios on a simulated cluster.

Each scenario builds node A (initiator) and node B (target), submits slices and adds a chaos
actor whose steps wait for a precondition and then inject a fault. ``pinned=True`` adds a
script (``ScenarioRun.script``) that forces the interleaving the RFC names; ``pinned=False``
leaves the order to a strategy, for exploration over many seeds.

Names (``SCENARIOS``):
- ``stale_completion_after_retry``: post succeeds, the slice is retried, the old completion
  arrives afterwards.
- ``partial_post_bad_wr``: a chain post fails at ``bad_wr`` while the posted prefix fails
  remotely.
- ``completion_error_retire_while_posting``: a completion error retires the endpoint while
  another worker is posting on it.
- ``qp_fatal_races_completion``: a QP-fatal event for the old QP is handled after the
  completion path retired that endpoint, it was reclaimed, and the slice went to a new
  endpoint (which, under legacy, reuses the old one's address).
- ``reclaim_with_pending_completions``: reclaim runs out of patience while the flush
  completions of a retired endpoint are still pending.
- ``handoff_while_flush_drains``: a local RNIC handoff rewrites a slice while its old flush
  completion is still draining.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from reference_engine.rdma import points as P
from reference_engine.rdma.sim.invariants import InvariantChecker
from reference_engine.rdma.sim.sim_cluster import SimCluster
from reference_engine.rdma.sim.sim_verbs import ERROR, FAIL_POST, HOLD, Fault
from reference_engine.rdma.slices import POSTED, Slice
from reference_engine.rdma.verbs import Opcode, QPState, WcStatus
from reference_engine.rdma.worker_pool import shard_of

SLICE = 4096
PATTERN = bytes(range(1, 17)) * SLICE
"""What node A's buffer holds before a scenario runs (16 slices, each byte naming its offset)."""
CHAOS_ACTOR = "chaos"
FABRIC_ACTOR = "fabric"


class Chaos:
    """A scripted environment actor: each step waits for its precondition, then acts."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], bool], Callable[[], None]]] = []
        self.pos = 0
        self.done: list[str] = []

    def step(self, name: str, ready: Callable[[], bool], action: Callable[[], None]) -> None:
        self.steps.append((name, ready, action))

    def has_work(self) -> bool:
        return self.pos < len(self.steps) and self.steps[self.pos][1]()

    def run(self):
        while self.pos < len(self.steps):
            name, ready, action = self.steps[self.pos]
            if not ready():
                yield P.IDLE
                continue
            action()
            self.done.append(name)
            self.pos += 1
            yield P.CHAOS


@dataclass
class ScenarioRun:
    name: str
    profile: str
    cluster: SimCluster
    checker: InvariantChecker
    chaos: Chaos
    slices: list[Slice]
    script: list[tuple[str, str | None]] = field(default_factory=list)
    actors: list = field(default_factory=list)

    @property
    def initiator(self):
        return self.cluster.peers["A"].transport


def _names(tr, ctx_index: int, target: str, device_id: int) -> tuple[str, str]:
    """(poster, poller) actor names for a slice to ``target``/``device_id`` on a context."""
    ctx = tr.contexts[ctx_index]
    model = tr.model
    shard = shard_of(target, device_id, model.shards)
    prefix = f"{tr.server_name}/{ctx.device_name}.w"
    poster = next(t for t in range(model.workers) if shard in model.post_shards(t))
    poller = next(t for t in range(model.workers) if 0 in model.poll_cqs(t))
    return prefix + str(poster), prefix + str(poller)


def _setup(name, profile, env, a_nics=("mlx5_0",), b_nics=("mlx5_0",), extra_nodes=(),
           **config):
    checker = InvariantChecker()
    cluster = SimCluster(profile, controlled=True, env=env, observer=None,
                         num_qp_per_ep=1, workers_per_ctx=2, slice_size=SLICE, **config)
    a = cluster.add_node("A", a_nics, buffer_len=1 << 17)
    b = cluster.add_node("B", b_nics, buffer_len=1 << 17)
    for node in extra_nodes:
        cluster.add_node(node, ("mlx5_0",), buffer_len=1 << 17)
    cluster.observer = checker
    cluster.fabric.observer = checker
    a.transport.observer = checker
    checker.watch(a.transport)
    a.node.memory.view(a.buffer_addr, 16 * SLICE)[:] = PATTERN
    return cluster, a, b, checker


def _submit(a, b, checker, n: int, offset: int = 0) -> list[Slice]:
    task = a.transport.submit(b.name, [(Opcode.RDMA_WRITE, a.buffer_addr + offset, n * SLICE,
                                        b.buffer_addr + offset)])
    checker.track(task.slices)
    return task.slices


def stale_completion_after_retry(profile, env, pinned):
    cluster, a, b, checker = _setup("s1", profile, env, b_nics=("mlx5_0", "mlx5_1"))
    [s] = _submit(a, b, checker, 1)
    tr = a.transport
    chaos = Chaos()
    if pinned:
        cluster.fabric.inject(Fault(HOLD, local_addr=s.source_addr, tag="old"))
    chaos.step("force_retry", lambda: s.status == POSTED, lambda: tr.force_retry(s))
    if pinned:
        chaos.step("release_old", lambda: s.terminal, lambda: cluster.fabric.release("old"))
    return cluster, checker, chaos, [s], []


def partial_post_bad_wr(profile, env, pinned):
    cluster, a, b, checker = _setup("s2", profile, env)
    slices = _submit(a, b, checker, 4)
    fabric = cluster.fabric
    fabric.inject(Fault(ERROR, local_addr=slices[0].source_addr, status=WcStatus.REM_ACCESS_ERR))
    fabric.inject(Fault(FAIL_POST, local_addr=slices[2].source_addr))
    poster, poller = _names(a.transport, slices[0].ctx_index, "B", slices[0].device_id)
    script = [(poster, P.AFTER_POST), (poster, P.RETRY), (poster, P.RETRY),
              (FABRIC_ACTOR, P.DELIVER), (poster, P.BEFORE_POST), (poller, P.RETIRE),
              (poster, P.AFTER_POST)] if pinned else []
    return cluster, checker, Chaos(), slices, script


def completion_error_retire_while_posting(profile, env, pinned):
    cluster, a, b, checker = _setup("s3", profile, env)
    [s1] = _submit(a, b, checker, 1)
    cluster.fabric.inject(Fault(ERROR, local_addr=s1.source_addr, status=WcStatus.REM_ACCESS_ERR))
    chaos = Chaos()
    later: list[Slice] = []
    chaos.step("submit_second", lambda: s1.status == POSTED,
               lambda: later.extend(_submit(a, b, checker, 1, offset=SLICE)))
    poster, poller = _names(a.transport, s1.ctx_index, "B", s1.device_id)
    script = [(poster, P.AFTER_POST), (CHAOS_ACTOR, P.CHAOS), (FABRIC_ACTOR, P.DELIVER),
              (poster, P.BEFORE_POST), (poller, P.RETIRE), (poster, P.AFTER_POST)] if pinned else []
    return cluster, checker, chaos, [s1], script


def qp_fatal_races_completion(profile, env, pinned):
    cluster, a, b, checker = _setup("s4", profile, env)
    [s] = _submit(a, b, checker, 1)
    tr = a.transport
    fabric = cluster.fabric
    fabric.inject(Fault(ERROR, local_addr=s.source_addr, status=WcStatus.REM_ACCESS_ERR))
    chaos = Chaos()

    def first_qp_num():
        posts = checker.posts.get(s)
        return posts[0][1] if posts else None

    def qp_in_error() -> bool:
        num = first_qp_num()
        if num is None:
            return False
        qp = fabric.qps.get(num)
        return qp is None or qp.state == QPState.ERR

    chaos.step("qp_fatal", qp_in_error, lambda: fabric.raise_qp_fatal_num(
        tr.contexts[s.ctx_index].verbs, first_qp_num()))
    poster, poller = _names(tr, s.ctx_index, "B", s.device_id)
    script = [(poster, P.AFTER_POST), (FABRIC_ACTOR, P.DELIVER), (poller, P.RETIRE),
              ("A/monitor", P.RECLAIM), (poller, P.RETRY), (poster, P.AFTER_POST),
              (CHAOS_ACTOR, P.CHAOS), ("A/monitor", P.EVENT)] if pinned else []
    return cluster, checker, chaos, [s], script


def reclaim_with_pending_completions(profile, env, pinned):
    cluster, a, b, checker = _setup("s5", profile, env)
    [s] = _submit(a, b, checker, 1)
    tr = a.transport
    chaos = Chaos()
    chaos.step("disconnect_all", lambda: s.status == POSTED, tr.disconnect_all)
    poster, _ = _names(tr, s.ctx_index, "B", s.device_id)
    script = [(poster, P.AFTER_POST), (CHAOS_ACTOR, P.CHAOS), ("A/monitor", P.TIME),
              ("A/monitor", P.RECLAIM)] if pinned else []
    return cluster, checker, chaos, [s], script


def handoff_while_flush_drains(profile, env, pinned):
    cluster, a, b, checker = _setup("s6", profile, env, a_nics=("mlx5_0", "mlx5_1"))
    [s] = _submit(a, b, checker, 1)
    tr = a.transport
    fabric = cluster.fabric
    chaos = Chaos()
    origin = s.ctx_index
    chaos.step("device_fatal", lambda: s.status == POSTED,
               lambda: fabric.raise_device_fatal(tr.contexts[origin].verbs))
    chaos.step("force_handoff", lambda: s.status == POSTED and s.ctx_index == origin,
               lambda: tr.force_retry(s, handoff=True))
    poster, _ = _names(tr, origin, "B", s.device_id)
    other = 1 - origin
    poster2, _ = _names(tr, other, "B", s.device_id)
    script = [(poster, P.AFTER_POST), (CHAOS_ACTOR, P.CHAOS), (CHAOS_ACTOR, P.CHAOS),
              (poster2, P.AFTER_POST)] if pinned else []
    return cluster, checker, chaos, [s], script


SCENARIOS: dict[str, Callable] = {
    "stale_completion_after_retry": stale_completion_after_retry,
    "partial_post_bad_wr": partial_post_bad_wr,
    "completion_error_retire_while_posting": completion_error_retire_while_posting,
    "qp_fatal_races_completion": qp_fatal_races_completion,
    "reclaim_with_pending_completions": reclaim_with_pending_completions,
    "handoff_while_flush_drains": handoff_while_flush_drains,
}


def two_worker_batch(profile, env, pinned):
    """No faults: two workers post twenty slices over two rails, each completion delivered
    separately (~50 steps; the scheduler benchmark's baseline)."""
    cluster, a, b, checker = _setup("bench", profile, env, b_nics=("mlx5_0", "mlx5_1"))
    slices = [s for i in range(5) for s in _submit(a, b, checker, 4, offset=4 * i * SLICE)]
    return cluster, checker, Chaos(), slices, []


def eviction_while_posted(profile, env, pinned):
    """A store of one endpoint evicts the endpoint a slice is still posted on (to reach a
    second peer): eviction must retire through the two-phase path like every other cause."""
    cluster, a, b, checker = _setup("evict", profile, env, extra_nodes=("C",), max_ep_per_ctx=1)
    [s1] = _submit(a, b, checker, 1)
    chaos = Chaos()
    later: list[Slice] = []
    chaos.step("submit_to_other_peer", lambda: s1.status == POSTED,
               lambda: later.extend(_submit(a, cluster.peers["C"], checker, 1, offset=SLICE)))
    poster, _ = _names(a.transport, s1.ctx_index, "B", s1.device_id)
    poster_c, _ = _names(a.transport, s1.ctx_index, "C", 0)
    script = [(poster, P.AFTER_POST), (CHAOS_ACTOR, P.CHAOS), (poster_c, P.AFTER_POST)
              ] if pinned else []
    return cluster, checker, chaos, [s1], script


EXTRA_SCENARIOS: dict[str, Callable] = {"two_worker_batch": two_worker_batch,
                                        "eviction_while_posted": eviction_while_posted}


def build(name: str, profile: str = "rfc", env: Mapping[str, str] | None = None,
          pinned: bool = False) -> ScenarioRun:
    try:
        make = SCENARIOS.get(name) or EXTRA_SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    cluster, checker, chaos, slices, script = make(profile, dict(env or {}), pinned)
    actors = list(cluster.peers["A"].transport.actors())
    actors.append((FABRIC_ACTOR, cluster.fabric_actor(), cluster.fabric_has_work))
    actors.append((CHAOS_ACTOR, chaos.run(), chaos.has_work))
    return ScenarioRun(name, profile, cluster, checker, chaos, slices, script, actors)
