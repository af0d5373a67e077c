"""The lab's tests share one 3-node lab per xdist worker (``mc_lab``), and drive its engines
through their control channels (JSON lines) from the host, across the lab's addresses."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from pytest_mooncake.lab.fixture import mc_lab, mc_lab_fleet  # noqa: F401


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # one lab for all of them under --dist loadgroup (otherwise one per worker that runs any)
    for item in items:
        if "mc_lab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("mc_lab"))


class EngineControl:
    """One request per connection to a reference engine's control port."""

    def __init__(self, address: str, timeout: float = 30.0):
        host, _, port = address.rpartition(":")
        self.host, self.port, self.timeout = host, int(port), timeout

    def call(self, op: str, **args: Any) -> Any:
        with socket.create_connection((self.host, self.port), timeout=self.timeout) as s:
            s.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
            line = s.makefile("rb").readline()
        if not line:
            raise ConnectionError(f"engine {self.host}:{self.port} closed the channel during {op}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"engine {self.host}:{self.port} refused {op}: {reply}")
        return reply["result"]

    def write(self, peer: str, offset: int, data: bytes) -> dict[str, Any]:
        return self.call("write", peer=peer, offset=offset,
                         data_b64=base64.b64encode(data).decode())

    def local_read(self, offset: int, length: int) -> bytes:
        return base64.b64decode(self.call("local_read", offset=offset, length=length)["data_b64"])


@pytest.fixture(autouse=True)
def lab_engines_running(request: pytest.FixtureRequest) -> None:
    """The engines ``lab up`` starts run when a lab test begins: the cluster target's
    per_test engines are stopped at the end of the test that used them."""
    if "mc_lab" not in request.fixturenames:
        return
    lab = request.getfixturevalue("mc_lab")
    for placed in lab.plan.engines:
        lab.fleet.node(placed.component.node).ensure_running(placed.component.name)


@pytest.fixture
def engines(mc_lab):  # noqa: F811
    """Control clients of the engines the lab started, by node name (seg-a on n1, seg-b on
    n2, seg-c on n3)."""
    return {p.component.node: EngineControl(p.entry["control"]) for p in mc_lab.plan.engines}
