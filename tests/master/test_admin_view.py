"""The admin server serves any read-only MasterView and MasterActions: no master node needed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

import pytest

from reference_engine.master.admin import AdminServer
from reference_engine.master.node_view import Replication, StandbyReplication


@dataclass
class View:
    address: str = "127.0.0.1:7001"
    profile_name: str = "legacy"
    role: str = "standby"
    runtime_state: str = "standby"
    serving: bool = False
    view_version: int = 4
    leader_view: object = None
    last_validation: object = None
    counters: Counter = field(default_factory=lambda: Counter(promotions_refused=2))
    snapshot_counters: Counter = field(default_factory=Counter)

    def key_count(self) -> int:
        return 3

    def keys(self) -> list[str]:
        return ["a", "b", "c"]

    def promotability(self) -> dict:
        return {"promotable": False, "reason": "behind"}

    def replication(self) -> Replication:
        return Replication(5, 9, 4, standby=StandbyReplication(3, 2, 5, 1, 0))


class Actions:
    def __init__(self) -> None:
        self.asked: list[float] = []

    def request_promotion(self, timeout: float) -> tuple[int, dict]:
        self.asked.append(timeout)
        return 409, {"promoted": False, "reason": "refused"}

    def write_snapshot(self) -> dict:
        return {"path": "snap-1"}


@pytest.fixture
def admin():
    actions = Actions()
    server = AdminServer("127.0.0.1", 0, view=View(), actions=actions)
    server.start()
    yield f"http://{server.address}", actions
    server.close()


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read()


def test_health_and_metrics_come_from_the_view(admin):
    base, _ = admin
    status, body = get(base + "/health")
    health = json.loads(body)
    assert status == 200 and health["profile"] == "legacy" and health["role"] == "standby"
    assert health["view_version"] == 4 and health["leader_address"] is None
    metrics = dict(line.split(" ", 1) for line in get(base + "/metrics")[1].decode().splitlines()
                   if not line.startswith("#"))
    assert metrics["master_key_count"] == "3" and metrics["ha_standby_state"] == "3"
    assert metrics["ha_oplog_applied_sequence_id"] == "5"
    assert metrics["ha_oplog_last_sequence_id"] == "9" and metrics["ha_oplog_standby_lag"] == "4"
    assert metrics["ha_promotions_refused_total"] == "2" and metrics["ha_promotions_total"] == "0"
    assert "ha_batch_record_durable_sequence" not in metrics
    assert json.loads(get(base + "/get_all_keys")[1]) == {"keys": ["a", "b", "c"]}


def test_posts_go_to_the_actions(admin):
    base, actions = admin
    req = urllib.request.Request(base + "/ha/promote", data=b'{"timeout": 2.5}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 409 and json.loads(err.value.read())["reason"] == "refused"
    assert actions.asked == [2.5]
    req = urllib.request.Request(base + "/ha/snapshot", data=b"{}", method="POST")
    assert json.loads(urllib.request.urlopen(req, timeout=5).read()) == {"path": "snap-1"}
