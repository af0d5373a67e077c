"""``no_torn_descriptors`` on histories recorded by real chaos runs, not hand-written ones.

Two workers publish versions of engine A's descriptor straight into the real etcd and resolve
it through engine B (a real process, TTL 0, its metadata traffic through a proxy of the fault
server) while the nemesis cuts B's metadata network. B answers from the store or, while cut,
from its last good snapshot (MR-4); either way every descriptor it returns is one that was
published. The checker must say so on the recorded history (and on its JSON-lines file), and
must report INVALID, naming the mixed fields, once one observation in that history is replaced
by a mix of two published versions.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

from pytest_mooncake.chaos.checkers import DESCRIPTOR, PUBLISH, no_torn_descriptors
from pytest_mooncake.chaos.generator import GenContext, Generator, OpSpec
from pytest_mooncake.chaos.history import History, Op
from pytest_mooncake.chaos.nemesis import partition
from pytest_mooncake.chaos.runner import fail, ok
from pytest_mooncake.planting import plant, published, with_probe_buffer

VERSIONS = 4


class DescriptorWorkload(Generator):
    """Each worker publishes the first version, then publishes a random version (30 %) or
    observes the descriptor (70 %)."""

    def __init__(self, segment: str, versions: list[dict[str, Any]]):
        self.segment = segment
        self.versions = versions

    def stream(self, ctx: GenContext) -> Iterator[OpSpec]:
        yield OpSpec(PUBLISH, self.segment, self.versions[0])
        while True:
            if ctx.rng.random() < 0.3:
                yield OpSpec(PUBLISH, self.segment, ctx.rng.choice(self.versions))
            else:
                yield OpSpec(DESCRIPTOR, self.segment)


class DescriptorClient:
    """``publish``: put the version into the store; ``descriptor``: what engine B resolves."""

    def __init__(self, store: Any, observer: Any):
        self.store = store
        self.observer = observer

    def invoke(self, spec: OpSpec):
        if spec.f == PUBLISH:
            plant(self.store, spec.key, spec.value)
            return ok(None)
        seen = self.observer.lookup(spec.key)
        return ok(dict(seen.descriptor)) if seen.ok else fail(seen.error or "lookup failed")


def _versions(base: dict[str, Any]) -> list[dict[str, Any]]:
    """Whole versions that differ from each other in two fields, buffers and timestamp, so a
    mix of two is none of them."""
    out, doc = [], base
    for n in range(VERSIONS):
        if n:
            doc = with_probe_buffer(doc, f"v{n}")
        out.append(dict(doc, timestamp=f"2026-01-01 00:00:{n:02d}.000000"))
    return out


def _recorded_run(mc_chaos, mc_engine, mc_metadata, mc_faults, prefix: str):
    proxy, listen = mc_faults.proxy("descriptor-meta", mc_metadata.address)
    a = mc_engine(f"{prefix}-a")
    b = mc_engine(f"{prefix}-b", metadata=mc_metadata.through(listen), ttl_ms=0)
    versions = _versions(published(mc_metadata, a.segment))
    result = mc_chaos.run(
        lambda w: DescriptorClient(mc_metadata, b),
        DescriptorWorkload(a.segment, versions).stagger(0.005),
        [partition(proxy, "B's metadata network")],
        workers=2, seconds=2.0, max_ops=600, quiet=(0.2, 0.4), hold=(0.2, 0.4))
    observed = [op for op in result.history.ops if op.f == DESCRIPTOR and op.type == "ok"]
    assert result.faults_injected >= 1, "the nemesis never cut B's metadata network"
    assert len(observed) >= 10, f"only {len(observed)} descriptor observations recorded"
    return result, versions, observed


def _canon(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)


def test_recorded_history_of_whole_descriptors_is_valid(mc_chaos, mc_engine, mc_metadata,
                                                        mc_faults, tmp_path) -> None:
    result, _, observed = _recorded_run(mc_chaos, mc_engine, mc_metadata, mc_faults,
                                        tmp_path.name)
    seen = {_canon(op.value) for op in observed}
    assert len(seen) >= 2, "B observed a single version: the run did not exercise refreshes"

    verdict = no_torn_descriptors(result.history)
    assert verdict.valid is True, verdict.explanation
    recorded = History.from_jsonl(tmp_path / "chaos" / "history-1.jsonl")
    assert no_torn_descriptors(recorded).valid is True, "the written history judges otherwise"


def test_a_mixed_descriptor_injected_into_a_recorded_history_is_invalid(
        mc_chaos, mc_engine, mc_metadata, mc_faults, tmp_path) -> None:
    result, versions, observed = _recorded_run(mc_chaos, mc_engine, mc_metadata, mc_faults,
                                               tmp_path.name)
    assert no_torn_descriptors(result.history).valid is True
    victim = observed[len(observed) // 2]
    other = next(v for v in versions if _canon(v) != _canon(victim.value))
    torn = dict(victim.value, timestamp=other["timestamp"])  # one version's buffers, another's time
    assert _canon(torn) not in {_canon(v) for v in versions}
    ops: list[Op] = [dataclasses.replace(op, value=torn) if op.index == victim.index else op
                     for op in result.history.ops]

    verdict = no_torn_descriptors(ops)
    assert verdict.valid is False, verdict.explanation
    assert [op.type for op in verdict.ops] == ["invoke", "ok"], verdict.explanation
    assert verdict.ops[-1].index == victim.index and verdict.ops[-1].value == torn
    assert f"read #{victim.index} of {victim.key}" in verdict.explanation
    diffs = re.findall(r"from #\d+ in ([a-z_, ]+)", verdict.explanation)
    assert diffs, f"the explanation names no differing fields: {verdict.explanation}"
    named = {f for d in diffs for f in d.split(", ")}
    assert named <= {"buffers", "timestamp"}, f"fields named beyond the mixed ones: {named}"
