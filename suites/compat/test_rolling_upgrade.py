"""MR-17 (and MR-8's third clause): the metadata RFC's rollout order keeps a mixed cluster
transferring at every step.

  1. deploy readers that accept both formats,
  2. enable writers to publish instance_id,
  3. enable invalidation on instance change (a new writer incarnation is followed).

Each upgrade is what an operator does: stop the process, start the new build under the same
segment name. Run once per upgrade path of pytest_mooncake/data/skew/rolling-upgrade.toml, from an old
build to the target under test; release-upgrade.toml upgrades one real release to another
(processes), image-upgrade.toml one release image to another (containers).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_mooncake.waits import Timeout, wait_until

WAIT = 10.0
TTL_MS = 200

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


def keeps_transferring(reader, writer, step: str, payload: bytes) -> None:
    def lands() -> bool:
        result = reader.write("seg-w", 0, payload)
        return result.ok and writer.local_read(0, len(payload)) == payload

    try:
        wait_until(lands, WAIT, f"transfers at step '{step}'")
    except Timeout:
        pytest.fail(f"rolling upgrade, step '{step}': the reader's writes stopped reaching the "
                    f"writer for {WAIT:g}s; MR-17 requires a mixed cluster keep transferring at "
                    f"every step of the rollout order (readers, then writers, then invalidation)",
                    pytrace=False)


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
    writer = cluster.upgrade(writer, "seg-w")
    keeps_transferring(reader, writer, "writer restarted (new instance)", b"step-3-restart!!")


@pytest.mark.mc_req("MR-8", "MR-17")
@pytest.mark.mc_skew("rolling-upgrade", "release-upgrade", "image-upgrade")
def test_old_readers_read_new_descriptors(cluster, mc_skew):
    writer = cluster.start("new", "seg-w")
    old_reader = cluster.start("old", "seg-r")
    keeps_transferring(old_reader, writer, "old reader, new writer", b"old-reads-new!!!")
