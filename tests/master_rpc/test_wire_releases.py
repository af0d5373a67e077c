"""Our master RPC client against the releases' real ``mooncake_master``: the probe round-trips
on every release, a layout the master does not speak is refused by it (not misread), and a
deadline holds against a master that never answers."""

from __future__ import annotations

import pytest
from wire_release_list import WIRE_RELEASES

from pytest_mooncake.master_rpc.client import MasterRpcClient, RpcError, RpcTimeout
from pytest_mooncake.master_rpc.layouts import by_name
from pytest_mooncake.master_rpc.probe import INVALID_ARGUMENTS, probe

FAMILY = {"0.3.10.post2": "0.3.10", "0.3.11.post1": "0.3.11", "0.3.12.post1": "0.3.12", "0.3.13.post1": "0.3.13",
          "0.3.14": "0.3.14"}


@pytest.mark.parametrize("release", WIRE_RELEASES)
def test_the_probe_round_trips_every_call_on_the_release(real_master, release):
    master = real_master(release)
    result = probe(master.address, seed=1)
    assert result.usable, result.summary()
    assert result.layout.name == FAMILY[release], result.summary()
    bad = [s for s in result.steps if not s.ok]
    assert not bad, result.summary()


def test_the_master_refuses_arguments_of_another_family_rather_than_misreading_them(real_master):
    master = real_master("0.3.10.post2")
    with MasterRpcClient(master.address, by_name("0.3.12"), timeout=5) as c:
        with pytest.raises(RpcError) as refused:
            c.get_replica_list("k")
        assert refused.value.code == INVALID_ARGUMENTS
        assert c.service_ready().ok, "a refused call must leave the connection usable"


def test_a_call_to_a_stopped_master_ends_at_the_callers_deadline(real_master):
    master = real_master("0.3.14")
    with MasterRpcClient(master.address, by_name("0.3.13"), timeout=5) as c:
        assert c.ping((1, 1)).ok
        master.pause()
        try:
            with pytest.raises(RpcTimeout, match="deadline"):
                c.ping((1, 1), timeout=0.5)
        finally:
            master.resume()
        assert c.ping((1, 1)).ok, "after the deadline the client reconnects for the next call"
