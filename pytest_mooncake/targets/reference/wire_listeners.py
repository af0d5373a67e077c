"""The reference masters' second listener: each reference master of a cluster answers
mooncake_master's own RPC (coro_rpc + struct_pack) on a port of its own, beside its JSON-RPC
port, through a ``CoroGateway`` the cluster starts with it. So ``wire_client`` (MP-7/MP-8 on
the wire) and a release's own ``mooncake.store`` client (``endpoint().listeners``) reach a
reference master the way they reach a real one."""

from __future__ import annotations

from pytest_mooncake.master_rpc.probe import ProbeResult
from pytest_mooncake.targets.master_wire_clients import MasterWireClients
from pytest_mooncake.targets.reference.coro_gateway import CoroGateway
from reference_engine.master.protocol import MASTER_VERSION


class CoroListeners(MasterWireClients):
    """Mixed into the reference master cluster; needs ``masters`` (with ``address``)."""

    def wire_listener(self, index: int) -> str:
        """``host:port`` where master ``index`` answers the Mooncake wire (started once; it
        follows the master across restarts on its port)."""
        gateways = self.__dict__.setdefault("_coro_listeners", {})
        if index not in gateways:
            gateways[index] = CoroGateway(self.masters[index].address).__enter__()
        return gateways[index].address

    def rpc_address(self, index: int) -> str:
        return self.wire_listener(index)

    def wire_judged_version(self, found: ProbeResult) -> str | None:
        """A reference master judges a client's version against its own protocol version;
        its listener answers ServiceReady() with "2.0.0" only because every release's client
        requires that string."""
        return MASTER_VERSION if found.takes_version else found.master_version

    def close_wire_listeners(self) -> None:
        self.close_wire_clients()
        for gateway in self.__dict__.pop("_coro_listeners", {}).values():
            gateway.close()
