"""MR-4 and MR-5 with the metadata store's process down, not only its network: the store
(etcd or Redis, the session's own) is stopped with SIGTERM, so the engine's connection is closed
by the store's host rather than refused or swallowed by a proxy. Backends differ exactly here
(a client that reuses one connection, one that reconnects, how each maps the error), so both are
judged the same way: an ordinary refresh keeps the previous snapshot, a forced refresh fails
within its bound, and once the store is back (a Redis without persistence comes back empty, so
the descriptor is planted again, as the owner's next publish would) a forced refresh succeeds.
"""

from __future__ import annotations

import pytest

from pytest_mooncake.planting import described, plant, published, shows
from pytest_mooncake.targets import TargetLacks
from pytest_mooncake.waits import Timeout, holds_for, wait_until, within

WAIT = 10.0
SHORT_TTL_MS = 200
LONG_TTL_MS = 600_000
BOUND = 2 * WAIT
"""How long a lookup may take with the store down before it counts as hung (the suites' bound
for a refresh that cannot complete, as for a black-holed network)."""

pytestmark = [pytest.mark.mc_requires("engine", "cache_control"),
              pytest.mark.parametrize("mc_metadata", ["etcd", "redis"], indirect=True)]


@pytest.fixture
def store_server(request, mc_target, mc_metadata):
    """The session's etcd or Redis that ``mc_metadata`` is (or the target's own server of it,
    ``metadata_server``: the docker target's etcd container), restarted when the test ends."""
    own = getattr(mc_target, "metadata_server", None)
    server = (own(mc_metadata) if own is not None else None) or \
        request.getfixturevalue("mc_" + mc_metadata.kind)
    if not server.owned:
        raise TargetLacks("metadata_faults", f"the {mc_metadata.kind} given by address "
                          f"({server.endpoints[0]}) is not the session's to stop")
    if mc_metadata.address not in server.endpoints:
        raise TargetLacks("metadata_faults", (
            f"the target's {mc_metadata.kind} metadata store ({mc_metadata.address}) is not the "
            f"session's server ({server.endpoints[0]}), so the test cannot stop it"))
    yield server
    if not server.alive():
        server.start()


def _planted(metadata, segment: str, doc) -> bool:
    try:
        plant(metadata, segment, doc)
    except OSError:
        return False
    return True


@pytest.mark.mc_req("MR-4")
@pytest.mark.mc_demands("cache_ttl")
def test_a_dead_store_during_a_refresh_keeps_the_previous_snapshot(mc_engine, mc_metadata,
                                                                   store_server):
    mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=SHORT_TTL_MS)
    first = published(mc_metadata, "seg-a")
    assert shows(b.lookup("seg-a"), first), described(b.lookup("seg-a"))
    store_server.stop()
    last = []

    def serves() -> bool:
        last[:] = [b.lookup("seg-a")]
        return shows(last[0], first)

    try:
        holds_for(serves, 4 * SHORT_TTL_MS / 1000,
                  f"B returning A's last good descriptor while its {mc_metadata.kind} store is "
                  f"down (MR-4: an ordinary refresh that fails keeps and returns the previous "
                  f"snapshot)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: it served {described(last[0])}") from None
    assert b.alive(), f"B died while its {mc_metadata.kind} store was down"


@pytest.mark.mc_req("MR-5")
@pytest.mark.mc_demands("forced_refresh")
def test_a_forced_refresh_against_a_dead_store_fails_within_its_bound(mc_engine, mc_metadata,
                                                                      store_server):
    mc_engine("seg-a")
    b = mc_engine("seg-b", prefer_ttl_ms=LONG_TTL_MS)
    good = published(mc_metadata, "seg-a")
    assert b.lookup("seg-a").ok
    store_server.stop()
    try:
        forced = within(BOUND, b.lookup, "seg-a", True,
                        what=f"a forced refresh of A with the {mc_metadata.kind} store down")
    except Timeout:
        pytest.fail(f"with the {mc_metadata.kind} store down, B's forced refresh of A did not "
                    f"return within {BOUND:g}s; MR-5 requires a failed forced refresh to return "
                    f"a failure", pytrace=False)
    assert not forced.ok, (
        f"with the {mc_metadata.kind} store down, a forced refresh of A returned success with "
        f"{described(forced)}; MR-5 requires a failed forced refresh to return a failure, "
        f"never the stale snapshot as success")
    store_server.start()
    wait_until(lambda: _planted(mc_metadata, "seg-a", good), WAIT,
               f"the test's own client to write A's descriptor into the restarted "
               f"{mc_metadata.kind} (its first call after the restart may find its old "
               f"connection closed)")
    wait_until(lambda: b.lookup("seg-a", force=True).ok, WAIT,
               f"forced refreshes to succeed again once the {mc_metadata.kind} store was back")
