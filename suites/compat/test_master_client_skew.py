"""MP-8 across builds: masters of one implementation serving store clients of another.

pytest_mooncake/data/skew/master-client.toml pairs the target's masters with clients of the reference's two
profiles (masters upgraded first) and the target's clients with reference masters of both
profiles (clients upgraded first); each client announces its build's own version, and the mixed
cluster must serve both builds' reads and writes. pytest_mooncake/data/skew/master-version-skew.toml has
clients announce a skewed version: a compatible one (same major version: the RFC's relaxed
major-version check, unknown fields ignored) is accepted for reads and writes alike; an
incompatible one (another major) is rejected for reads and writes alike, with a master-side
log line naming the peer's version, while the rest of the cluster keeps serving.

The masters come from ``mc_skew.target("master").master_cluster(...)``, the other build's
clients from ``mc_skew.target("client").store_client(cluster.endpoint(), version=...)``. A pair
whose clients cannot speak the masters' protocol, or cannot announce a version, is n/a.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_mooncake.targets import MasterEndpoint
from pytest_mooncake.waits import Timeout, wait_until

WAIT = 20.0


def exists(answer) -> bool:
    return bool(answer.get("ok") and (answer.get("result") or {}).get("exists"))


def failure(answer) -> str:
    return str(answer.get("message") or answer.get("error") or answer.get("result"))


def semver(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        pytest.fail(f"precondition: the masters announce version {version!r}, not MAJOR.MINOR...; "
                    f"MP-8's compatibility rule (same major) cannot be applied", pytrace=False)


def compatible_with(version: str) -> str:
    major, minor = semver(version)
    return f"{major}.{minor + 1}.0"


INCOMPATIBLE = {
    "other-major": "a neighbouring major version",
    "major-sharing-leading-digit": "a longer major whose leading digit is the masters' major",
}
"""How an incompatible version differs from the masters' (the second is a boundary of parsing
the major: 11 is not 1)."""


def incompatible_with(version: str, kind: str = "other-major") -> str:
    major, minor = semver(version)
    if kind == "major-sharing-leading-digit":
        return f"{major}1.{minor}.0"
    return f"{major - 1}.{minor}.0" if major > 0 else f"{major + 1}.0.0"


class Mixed:
    """The master role's cluster (one master and one client of its own build) and clients of
    the client role's build attached to it."""

    def __init__(self, mc_skew):
        self.skew = mc_skew
        self.master_target = mc_skew.require("master", "master_cluster")
        self.client_target = mc_skew.require("client", "foreign_master")
        self.master_impl = self.spelled("master")
        self.client_impl = self.spelled("client")
        self.cluster = None
        self.endpoint = None

    def start(self, skewed: bool = False) -> Mixed:
        """Start the masters, once the client build is known to be able to attach to them
        (and, ``skewed``, to announce a version): otherwise the pair is n/a, naming why."""
        expected = MasterEndpoint(self.master_target.master_protocol, (), "", "",
                                  self.master_target.version, listeners=tuple(
                                      (protocol, "") for protocol
                                      in self.master_target.master_listener_protocols))
        lacks = self.client_target.store_client_lacks(expected, "0.0.0" if skewed else None)
        if lacks:
            raise lacks
        self.cluster = self.master_target.master_cluster(masters=1, clients=1)
        self.endpoint = self.cluster.endpoint()
        return self

    def spelled(self, role: str) -> str:
        impl = self.skew.implementation(role)
        return "the target under test" if impl.target == "@target" else impl.name

    @property
    def own(self):
        """The master build's own client."""
        return self.cluster.client(0)

    def attach(self, name: str, version: str | None = None):
        return self.client_target.store_client(
            self.endpoint, client_id=f"{name}-{uuid.uuid4().hex[:6]}", version=version,
            wait_attached=False)

    def where(self) -> str:
        return (f"masters of {self.master_impl} ({self.endpoint.build}, version "
                f"{self.endpoint.version or 'not announced'}), clients of {self.client_impl}")

    def master_log(self) -> str:
        return self.cluster.master_log(self.cluster.leader())


def serves(client, key: str, what: str, where: str, seen_key: str | None = None) -> None:
    """``client`` writes ``key`` and reads it back (and ``seen_key``, written by another)."""
    try:
        wait_until(lambda: client.put(key, 64)["ok"] or exists(client.exists(key)), WAIT,
                   f"{what} to write")
    except Timeout:
        answer = client.put(key, 64)
        pytest.fail(f"{where}: {what}'s writes still failed after {WAIT:g}s ({failure(answer)}); "
                    f"MP-8 requires a mixed cluster keep serving reads and writes alike",
                    pytrace=False)
    for k in (key, seen_key) if seen_key else (key,):
        answer = client.exists(k)
        assert exists(answer), (
            f"{where}: {what} wrote but cannot read {k!r} (exists answered {answer}); MP-8 "
            f"requires reads and writes behave alike in a mixed cluster")


@pytest.fixture
def mixed(mc_skew):
    return Mixed(mc_skew)


@pytest.mark.mc_req("MP-8")
@pytest.mark.mc_skew("master-client", "release-master-client")
def test_a_mixed_cluster_serves_reads_and_writes_of_both_builds(mixed):
    mixed.start()
    where = mixed.where()
    serves(mixed.own, "k-own", f"the masters' own client ({mixed.master_impl})", where)
    other = mixed.attach("other-build")
    serves(other, "k-other", f"a client of {mixed.client_impl} at its own version", where,
           seen_key="k-own")
    assert exists(mixed.own.exists("k-other")), (
        f"{where}: the masters' own client cannot see 'k-other', written by the "
        f"client of {mixed.client_impl}; MP-8 requires a mixed cluster serve both builds alike")


@pytest.mark.mc_req("MP-8")
@pytest.mark.mc_skew("master-version-skew")
def test_compatible_client_version_is_accepted_for_reads_and_writes(mixed):
    mixed.start(skewed=True)
    version = compatible_with(mixed.endpoint.version)
    where = f"{mixed.where()}, announcing {version}"
    serves(mixed.own, "k-own", "the masters' own client", where)
    newer = mixed.attach("compatible", version=version)
    try:
        wait_until(lambda: newer.exists("k-own")["ok"] or newer.put("k-newer", 64)["ok"], WAIT,
                   f"a client announcing {version} to be answered")
    except Timeout:
        read, write = newer.exists("k-own"), newer.put("k-newer", 64)
        pytest.fail(f"{where}: for {WAIT:g}s the client was refused for reads ({failure(read)}) "
                    f"and writes ({failure(write)}); MP-8 requires compatible skew (same major "
                    f"version, unknown fields ignored) be accepted", pytrace=False)
    write, read = newer.put("k-newer-2", 64), newer.exists("k-own")
    assert write["ok"] and exists(read), (
        f"{where}: a compatible client got read ok={read['ok']} "
        f"({'found' if exists(read) else failure(read)}) and write ok={write['ok']} "
        f"({'stored' if write['ok'] else failure(write)}); MP-8 requires compatible skew be "
        f"accepted and reads and writes behave alike, so a partial rollout cannot look healthy "
        f"while writes fail")


@pytest.mark.mc_req("MP-8")
@pytest.mark.mc_skew("master-version-skew")
@pytest.mark.parametrize("kind", sorted(INCOMPATIBLE))
def test_incompatible_client_version_is_rejected_loudly_and_the_cluster_keeps_serving(mixed, kind):
    mixed.start(skewed=True)
    version = incompatible_with(mixed.endpoint.version, kind)
    where = f"{mixed.where()}, announcing {version} ({INCOMPATIBLE[kind]})"
    serves(mixed.own, "k-own", "the masters' own client", where)
    peer = mixed.attach("peer")
    old = mixed.attach("incompatible", version=version)
    # One write and one read, side by side: a refused call takes the client's reattach timeout.
    with ThreadPoolExecutor(2) as pool:
        writing, reading = pool.submit(old.put, "k-old", 64), pool.submit(old.exists, "k-own")
        write, read = writing.result(), reading.result()
    assert not write["ok"] and not read["ok"], (
        f"{where}: the incompatible client got read ok={read['ok']} and write ok={write['ok']} "
        f"({'stored' if write['ok'] else failure(write)}); MP-8 requires reads and writes "
        f"behave alike, so a partial rollout cannot look healthy while writes fail")
    log = mixed.master_log()
    assert version in log, (
        f"{where}: the master refused a client of version {version} without a log line naming "
        f"that version (its log has {len(log.splitlines())} lines); MP-8 requires version skew "
        f"be loud master-side, naming the peer version")
    serves(mixed.own, "k-own-after", "the masters' own client, after the rejection", where)
    serves(peer, "k-peer", f"a client of {mixed.client_impl} at its own version, after the "
           f"rejection", where, seen_key="k-own-after")
