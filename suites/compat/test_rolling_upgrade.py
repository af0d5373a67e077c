"""MR-17 (and MR-8's third clause): the metadata RFC's rollout order keeps a mixed cluster
transferring at every step.

  1. deploy readers that accept both formats,
  2. enable writers to publish instance_id,
  3. enable invalidation on instance change (a new writer incarnation is followed).

The writer's last restart keeps it down until the reader has missed it (its lookup fails), as
a restart in service does: readers resolve their peers meanwhile. A 0.3.14 reader that polled
the store during the gap never resumed transfers to the new writer (6 of 6 runs); restarted
at once, it resumed in about a second (a race the machine's load decided in earlier runs).

Each upgrade is what an operator does: stop the process, start the new build under the same
segment name. Run once per upgrade path of pytest_mooncake/data/skew/rolling-upgrade.toml, from an old
build to the target under test; release-upgrade.toml upgrades one real release to another
(processes), image-upgrade.toml one release image to another (containers).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pytest_mooncake.planting import described
from pytest_mooncake.waits import Timeout, wait_until

WAIT = 10.0
TTL_MS = 200
MISS_WAIT = 5.0
"""How long a restart's gap lasts at most: until the reader misses the stopped writer (its
lookup fails), else this many seconds (a reader that serves its cache through the gap)."""

pytestmark = [pytest.mark.mc_requires("engine")]


class Cluster:
    """Engines of several builds on one metadata store; every one stopped at the end."""

    def __init__(self, skew, metadata):
        self.skew = skew
        self.metadata = metadata
        self.engines = []

    def start(self, role: str, segment: str):
        target = self.skew.target(role)
        options = {"ttl_ms": TTL_MS} if target.missing("cache_ttl") is None else {}
        engine = target.start_engine(segment, self.metadata, **options)
        self.engines.append(engine)
        return engine

    def upgrade(self, engine, segment: str):
        engine.stop()
        return self.start("new", segment)

    def restart_after_gap(self, engine, segment: str, reader):
        """Stop ``engine`` and start the new build under its segment once ``reader`` has
        missed it: a restart in service takes seconds, and readers resolve their peers
        meanwhile (0.3.14's reader polls the store every second). Returns (engine, whether the
        reader missed it)."""
        engine.stop()
        try:
            wait_until(lambda: not reader.lookup(segment).ok, MISS_WAIT,
                       f"the reader to miss the stopped {segment}")
            missed = True
        except Timeout:
            missed = False
        return self.start("new", segment), missed

    def close(self) -> None:
        for engine in reversed(self.engines):
            try:
                engine.stop()
            except Exception:  # noqa: BLE001
                engine.kill()


@pytest.fixture
def cluster(mc_skew, mc_metadata) -> Iterator[Cluster]:
    c = Cluster(mc_skew, mc_metadata)
    try:
        yield c
    finally:
        c.close()


def stored(metadata, segment: str) -> str:
    """What the metadata store holds under ``segment``'s key, in a few words."""
    raw = metadata.get(metadata.segment_key(segment))
    if raw is None:
        return "no key"
    try:
        d = json.loads(raw)
    except ValueError:
        return f"{len(raw)} bytes that are not JSON"
    named = {k: d[k] for k in ("protocol", "tcp_data_port", "rpc_port", "instance_id") if k in d}
    return f"a descriptor of {len(raw)} bytes, {named}"


def keeps_transferring(reader, writer, step: str, payload: bytes, metadata=None) -> None:
    failed: list[str] = []

    def lands() -> bool:
        result = reader.write("seg-w", 0, payload)
        if not result.ok:
            failed.append(f"the write failed: {result.error}")
        elif writer.local_read(0, len(payload)) != payload:
            failed.append("the write returned ok, but the writer's buffer lacks its bytes")
        else:
            return True
        return False

    try:
        wait_until(lands, WAIT, f"transfers at step '{step}'")
    except Timeout:
        seen = f"{len(failed)} writes tried, the last: {failed[-1]}" if failed else "no write"
        if metadata is not None:
            seen += (f"; the store held {stored(metadata, 'seg-w')} and the reader's lookup "
                     f"returned {described(reader.lookup('seg-w'))}")
        pytest.fail(f"rolling upgrade, step '{step}': the reader's writes stopped reaching the "
                    f"writer for {WAIT:g}s ({seen}); MR-17 requires a mixed cluster keep "
                    f"transferring at every step of the rollout order (readers, then writers, "
                    f"then invalidation)", pytrace=False)


@pytest.mark.mc_req("MR-17")
@pytest.mark.mc_skew("rolling-upgrade", "release-upgrade", "image-upgrade")
def test_rollout_order_keeps_a_mixed_cluster_transferring(cluster, mc_skew):
    writer = cluster.start("old", "seg-w")
    reader = cluster.start("old", "seg-r")
    keeps_transferring(reader, writer, "all old", b"step-0-all-old!!")
    reader = cluster.upgrade(reader, "seg-r")
    keeps_transferring(reader, writer, "readers upgraded", b"step-1-readers!!")
    writer = cluster.upgrade(writer, "seg-w")
    keeps_transferring(reader, writer, "writers publish instance_id", b"step-2-writers!!")
    writer, missed = cluster.restart_after_gap(writer, "seg-w", reader)
    step = ("writer restarted (new instance) after the reader missed it" if missed else
            f"writer restarted (new instance), the reader serving its cache for {MISS_WAIT:g}s")
    keeps_transferring(reader, writer, step, b"step-3-restart!!", cluster.metadata)


@pytest.mark.mc_req("MR-8", "MR-17")
@pytest.mark.mc_skew("rolling-upgrade", "release-upgrade", "image-upgrade")
def test_old_readers_read_new_descriptors(cluster, mc_skew):
    writer = cluster.start("new", "seg-w")
    old_reader = cluster.start("old", "seg-r")
    keeps_transferring(old_reader, writer, "old reader, new writer", b"old-reads-new!!!")
