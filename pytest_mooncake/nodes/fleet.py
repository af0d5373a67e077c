"""The nodes of one cluster file with their components, faults and ledger: what a target holds.

    fleet = Fleet.from_file("cluster.toml")
    engine = fleet.node_of("engine-n2")
    engine.kill("engine-n2"); engine.start("engine-n2")
    cut = fleet.faults.partition("n2", ["n3"]); ...; cut.heal()
    fleet.close()        # heals what this run left outstanding, then closes the SSH sessions

``close`` also runs at interpreter exit when a caller forgot it (Ctrl-C in a script); what a
SIGKILL leaves behind stays in the ledger for ``python -m pytest_mooncake.cluster heal FILE``.
"""

from __future__ import annotations

import atexit
from pathlib import Path

from pytest_mooncake.nodes.faults import Faults, HealOutcome
from pytest_mooncake.nodes.ledger import Ledger, new_run_id
from pytest_mooncake.nodes.node import Node
from pytest_mooncake.nodes.ssh import SshSessions
from pytest_mooncake.schemas.cluster_manifest import ClusterFile, load_manifest


class Fleet:
    def __init__(self, spec: ClusterFile, run: str | None = None):
        self.spec = spec
        self.ssh = SshSessions()
        self.ledger = Ledger(spec.ledger_path)
        self.faults = Faults(spec, self.ledger, run or new_run_id())
        self.nodes: dict[str, Node] = {}
        for n in spec.nodes:
            mine = {c.name: c for c in spec.components if c.node == n.name}
            self.nodes[n.name] = Node(n, mine, self.ssh, self.faults)
        self.faults.nodes = self.nodes
        self._closed = False
        atexit.register(self._at_exit)

    @classmethod
    def from_file(cls, path: str | Path, run: str | None = None) -> Fleet:
        return cls(load_manifest(path), run)

    @property
    def run(self) -> str:
        return self.faults.run

    def node(self, name: str) -> Node:
        return self.faults.node(name)

    def node_of(self, component: str) -> Node:
        """The node that runs ``component``."""
        return self.node(self.spec.component(component).node)

    def heal(self) -> list[HealOutcome]:
        """Undo every fault this run applied and has not healed."""
        return self.faults.heal_all(self.run)

    def close(self, heal: bool = True) -> list[HealOutcome]:
        """Heal this run's outstanding faults (unless ``heal`` is False), close the sessions."""
        if self._closed:
            return []
        outcomes = self.heal() if heal else []
        self.ssh.close()
        self._closed = True
        atexit.unregister(self._at_exit)
        return outcomes

    def _at_exit(self) -> None:
        if not self._closed:
            self.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
