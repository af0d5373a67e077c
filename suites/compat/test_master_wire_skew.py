"""MP-8 across builds on the master's own wire (pytest_mooncake/data/skew/master-wire-skew.toml):
reference masters serving a real release's ``mooncake.store`` client (it attaches to the
leader's Mooncake-wire listener and runs its own version check against it), and a release's
masters serving a client that announces the reference's protocol version (the masters' wire
client, ``cluster.wire_client(version=...)``). Either the masters serve the other build's
client for reads and writes alike, or, its version being incompatible (another major), they
refuse it for both with a master-side log line naming that version."""

from __future__ import annotations

import uuid

import pytest

from pytest_mooncake.waits import Timeout, wait_until

WAIT = 20.0


def said(answer) -> str:
    if answer.get("ok"):
        return "ok"
    return str(answer.get("message") or answer.get("error") or answer.get("result"))


def exists(answer) -> bool:
    return bool(answer.get("ok") and (answer.get("result") or {}).get("exists"))


def major(version: str) -> str:
    return version.split(".", 1)[0]


@pytest.mark.mc_req("MP-8")
@pytest.mark.mc_skew("master-wire-skew")
def test_masters_serve_the_other_builds_client_alike_for_reads_and_writes_or_refuse_it_loudly(
        mc_skew):
    masters = mc_skew.require("master", "master_cluster", "master_wire")
    other = mc_skew.target("client")
    cluster = masters.master_cluster(masters=1, clients=0)
    endpoint = cluster.endpoint()
    own = cluster.wire_client()
    where = (f"masters of {masters.version} (version {own.master_version!r}), a client of "
             f"{other.version}")
    lacks = other.store_client_lacks(endpoint)
    if lacks is None:
        # the other build's own store client: its segment is the only one holding bytes
        client = other.store_client(endpoint, client_id=f"skew-{uuid.uuid4().hex[:6]}")
        try:
            wait_until(lambda: client.put("k-other", 64)["ok"], WAIT,
                       "the other build's client to write")
        except Timeout:
            pytest.fail(f"{where}: its writes failed for {WAIT:g}s (the last: "
                        f"{said(client.put('k-other', 64))}); MP-8 requires a mixed cluster "
                        f"serve both builds' writes", pytrace=False)
        assert own.put("k-own", 64)["ok"], f"{where}: precondition: the masters' own " \
                                           f"client could not write"
        read, seen = client.exists("k-own"), own.exists("k-other")
        assert exists(read) and exists(seen), (
            f"{where}: it wrote 'k-other' and reading 'k-own' answered {said(read)} "
            f"(found: {exists(read)}); the masters' own client reading 'k-other' answered "
            f"{said(seen)} (found: {exists(seen)}); MP-8 requires reads and writes of both "
            f"builds behave alike in a mixed cluster")
        return
    version = other.protocol_version
    if not version:
        raise lacks
    assert own.put("k-own", 64)["ok"], f"{where}: precondition: the masters' own client " \
                                       f"could not write"
    leader = cluster.leader()
    before = len(cluster.master_log(leader).splitlines())
    skew = cluster.wire_client(version=version)
    write, read = skew.put("k-skewed", 64), skew.exists("k-own")
    where += f" announcing {version}"
    if major(version) == major(own.master_version):
        assert write["ok"] and exists(read), (
            f"{where} (compatible: same major) got write {said(write)} and read {said(read)}; "
            f"MP-8 requires compatible skew be served for reads and writes alike")
        return
    if skew.offered_version is None:
        pytest.fail(f"{where} (incompatible: another major) cannot be refused: the masters' "
                    f"RPC has no place for a client's version ({skew.version_channel}); it was "
                    f"served (write {said(write)}, read {said(read)}); MP-8 requires the "
                    f"masters reject an incompatible client version, with a log line naming it",
                    pytrace=False)
    assert not write["ok"] and not read["ok"], (
        f"{where} (incompatible: another major) got write {said(write)} and read "
        f"{said(read)}; MP-8 requires an incompatible client be refused for reads and writes "
        f"alike")
    lines = cluster.master_log(leader).splitlines()[before:]
    assert any(version in line for line in lines), (
        f"{where}: refused without a master log line naming {version} ({len(lines)} new "
        f"lines); MP-8 requires version skew be loud master-side")
