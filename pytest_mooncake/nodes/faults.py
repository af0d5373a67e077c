"""Faults on a cluster's nodes: the operator's permission, the ledger, and the undo of each.

Kinds of fault and their undo:

  partition  a node drops a set of peers' packets (nft/iptables on the node)  -> rules removed
  link       the lab host downs the host end of a node's link (``ip link``)   -> link set up
  pause      SIGSTOP of a component                                           -> SIGCONT
  down       a component stopped or killed                                    -> started again

Every fault is in the ledger before it is applied. ``heal_all`` undoes what is outstanding:
network faults first (so restarted components reach etcd), then paused components, then
components that are down. A component started again by the test heals its own ``down`` and
``pause`` entries.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_mooncake.nodes import firewall
from pytest_mooncake.nodes.firewall import Direction, Peer
from pytest_mooncake.nodes.ledger import Entry, Ledger
from pytest_mooncake.nodes.node_errors import FaultNotAllowed, NodeError
from pytest_mooncake.schemas.cluster_manifest import ClusterFile

if TYPE_CHECKING:
    from pytest_mooncake.nodes.node import Node

_ORDER = {"partition": 0, "link": 0, "pause": 1, "down": 2}


@dataclass(frozen=True)
class Fault:
    """A fault this run applied; ``heal()`` undoes it now instead of at teardown."""

    id: str
    kind: str
    detail: dict[str, Any]
    faults: Faults

    def heal(self) -> str:
        return self.faults.heal(self.id)

    def __str__(self) -> str:
        return f"{self.kind} {self.id} {self.detail}"


@dataclass
class Recording:
    id: str
    noop: str = ""


@dataclass(frozen=True)
class HealOutcome:
    entry: Entry
    ok: bool
    what: str


class Faults:
    def __init__(self, spec: ClusterFile, ledger: Ledger, run: str):
        self.spec = spec
        self.ledger = ledger
        self.run = run
        self.nodes: dict[str, Node] = {}
        self._tools: dict[str, tuple[list[str], str]] = {}

    # ------------------------------------------------------------------ permission

    def require(self, action: str, kind: str | None, what: str) -> None:
        if not self.spec.faults.permits(action, kind):
            scoped = f" or {action}:{kind}" if kind else ""
            raise FaultNotAllowed(
                f"{self.spec.path}: [faults].allow does not permit {action!r}{scoped}, so this "
                f"run may not {what} (allow = {list(self.spec.faults.allow)}; add the permission "
                f"to opt in)")

    # ------------------------------------------------------------------ recording

    @contextmanager
    def recording(self, kind: str, **detail: Any) -> Iterator[Recording]:
        """Write the fault to the ledger, run the body (which applies it), mark it applied, or
        healed when the body found nothing to do (``rec.noop``). If the body fails the entry
        stays outstanding: its undo is harmless if nothing happened."""
        rec = Recording(self.ledger.begin(self.run, {"kind": kind, **detail}))
        yield rec
        if rec.noop:
            self.ledger.mark(rec.id, "healed", note=f"nothing done: {rec.noop}")
        else:
            self.ledger.mark(rec.id, "applied")

    def came_back(self, node: str, component: str, kinds: Sequence[str] = ("down", "pause"),
                  note: str = "came back") -> None:
        """A component runs again (or is where it should be: ``note`` says why): its outstanding
        down/pause entries (any run) are healed."""
        for e in self.ledger.outstanding():
            f = e.fault
            if f.get("kind") in kinds and f.get("node") == node and f.get("component") == component:
                self.ledger.mark(e.id, "healed", note=note)

    # ------------------------------------------------------------------ network faults

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise KeyError(f"{self.spec.path}: no node {name!r} (listed: "
                           f"{', '.join(sorted(self.nodes)) or 'none'})") from None

    def tools(self, node: str) -> tuple[list[str], str]:
        """The firewall tools that work on ``node`` and the address our SSH session comes from."""
        if node not in self._tools:
            r = self.node(node).script(firewall.DETECT, "detect firewall tools")
            lines = r.stdout.split("\n")
            tools = [line.strip() for line in lines if line.strip() in ("nft", "iptables")]
            ssh = next((line.split()[1] for line in lines
                        if line.startswith("ssh ") and len(line.split()) > 1), "")
            self._tools[node] = (tools, ssh)
        return self._tools[node]

    def _choose(self, node: str, override: str | None = None) -> str:
        want = override or self.spec.faults.firewall
        spec = self.node(node).spec
        if want == "link":
            return "link"
        have, _ = self.tools(node)
        if want != "auto":
            if want not in have:
                raise NodeError(node, f"[faults].firewall = {want!r} but {want} does not work "
                                      f"there (working: {', '.join(have) or 'none'})")
            return want
        if have:
            return have[0]
        if spec.lab_link:
            return "link"
        raise NodeError(node, "has neither a working nft nor iptables (install Debian's nftables "
                              "or iptables there) and is not a lab node with a link to cut")

    def resolve(self, peers: Sequence[str]) -> list[Peer]:
        """Node names become their addresses; ``ADDR`` and ``ADDR:PORT`` are taken as given."""
        out = []
        for p in peers:
            if p in self.nodes:
                addr = self.nodes[p].spec.peer_address
                if addr is None:
                    raise ValueError(f"node {p}: its host {self.nodes[p].spec.host!r} is not an "
                                     f"IP; give [[nodes]].address for partitions")
                out.append(Peer(addr))
            else:
                try:
                    out.append(Peer.parse(p))
                except ValueError:
                    raise ValueError(f"partition peer {p!r} is neither a node of "
                                     f"{self.spec.path} nor ADDR[:PORT]") from None
        return out

    def partition(self, node: str, peers: Sequence[str], *, direction: Direction = "both",
                  tool: str | None = None) -> Fault:
        """Make ``node`` drop traffic with ``peers`` (node names or ADDR[:PORT]) until healed.
        ``tool`` (nft, iptables) overrides ``[faults].firewall`` for this fault."""
        self.require("partition", None, f"partition {node} from {', '.join(peers)}")
        resolved = self.resolve(peers)
        if not resolved:
            raise ValueError(f"partition of {node}: no peers given")
        target = self.node(node)
        mine = target.spec.peer_address
        if any(p.address == mine for p in resolved):
            raise ValueError(f"partition of {node} from its own address {mine}")
        tool = self._choose(node, tool)
        if tool == "link":
            raise NodeError(node, (
                "a partition from chosen peers needs nft or iptables on the node; without them "
                "only isolate() (the lab cuts the node's whole link) is possible"))
        _, controller = self.tools(node)
        for p in resolved:
            if p.address == controller and (not p.ports or target.spec.port in p.ports):
                raise ValueError(f"partition of {node} from {p.to_json()} would cut our own SSH "
                                 f"session (we come from {controller}); heal could not reach it")
        detail = {"node": node, "tool": tool, "peers": [p.to_json() for p in resolved],
                  "direction": direction}
        with self.recording("partition", **detail) as rec:
            target.script(firewall.apply_script(tool, rec.id, resolved, direction),
                          f"partition {node} from {', '.join(detail['peers'])} ({tool})")
        return Fault(rec.id, "partition", detail, self)

    def isolate(self, node: str, tool: str | None = None) -> Fault:
        """Cut ``node`` off from every other node (with the lab's link tool: from everything,
        the controller included). ``tool`` overrides ``[faults].firewall`` for this fault."""
        self.require("partition", None, f"isolate {node}")
        tool = tool or self._choose(node)
        if tool == "link" and not self.node(node).spec.lab_link:
            raise NodeError(node, "is not a lab node ([[nodes]].lab_link unset): no link to cut")
        if tool != "link":
            others = [n for n in self.nodes if n != node]
            return self.partition(node, others)
        link = self.node(node).spec.lab_link
        detail = {"node": node, "tool": "link", "link": link}
        with self.recording("link", **detail) as rec:
            _ip_link(link, "down")  # type: ignore[arg-type]
        return Fault(rec.id, "link", detail, self)

    def isolate_from_etcd(self, node: str) -> Fault:
        """Cut ``node`` from the cluster file's ``[etcd].endpoints`` (their client ports only)."""
        endpoints = list(self.spec.etcd.endpoints)
        if not endpoints:
            raise ValueError(f"{self.spec.path}: [etcd].endpoints is empty; nothing to cut "
                             f"{node} from")
        return self.partition(node, list(endpoints))

    # ------------------------------------------------------------------ heal

    def _undo(self, e: Entry) -> str:
        f = e.fault
        kind = f.get("kind")
        if kind == "link":
            _ip_link(f["link"], "up")
            return f"link {f['link']} up"
        node = self.node(f["node"])
        if kind == "partition":
            node.script(firewall.undo_script(f["tool"], e.id), f"heal partition {e.id}")
            return f"partition {e.id} removed from {node.name}"
        if kind == "pause":
            return f"{f['component']}: {node.ensure_resumed(f['component'])}"
        if kind == "down":
            return f"{f['component']}: {node.ensure_running(f['component'])}"
        raise ValueError(f"ledger entry {e.id}: unknown fault kind {kind!r}")

    def heal(self, fault_id: str) -> str:
        """Undo one fault (raises what the undo raised; the entry then reads heal_failed)."""
        entry = next((e for e in self.ledger.entries() if e.id == fault_id), None)
        if entry is None:
            raise KeyError(f"{self.ledger.path}: no fault {fault_id}")
        if not entry.outstanding:
            return f"{fault_id} already healed"
        try:
            what = self._undo(entry)
        except Exception as exc:
            self.ledger.mark(fault_id, "heal_failed", note=str(exc)[:500])
            raise
        self.ledger.mark(fault_id, "healed", note=what)
        return what

    def heal_all(self, run: str | None = None) -> list[HealOutcome]:
        """Undo every outstanding fault (of ``run``, or of every run when None); never raises:
        each outcome says what happened."""
        todo = self.ledger.outstanding(run)
        todo.sort(key=lambda e: (_ORDER.get(e.fault.get("kind", ""), 9), -e.t))
        out = []
        for e in todo:
            try:
                out.append(HealOutcome(e, True, self.heal(e.id)))
            except Exception as exc:  # noqa: BLE001 (every fault gets its try)
                out.append(HealOutcome(e, False, f"{type(exc).__name__}: {exc}"))
        return out

    def sweep(self) -> list[str]:
        """Remove every rule of ours on every node and bring the lab's links up, whatever the
        ledger says. Returns what was removed or why a node could not be swept."""
        said = []
        for name, node in self.nodes.items():
            if node.spec.lab_link:
                _ip_link(node.spec.lab_link, "up")
            try:
                r = node.script(firewall.NFT_SWEEP + firewall.IPT_SWEEP, "sweep our firewall rules")
                said += [f"{name}: {line}" for line in r.stdout.splitlines() if line.strip()]
            except NodeError as exc:
                said.append(f"{name}: not swept: {exc}")
        return said

    def in_place(self, node: str) -> list[str]:
        """Our partitions present on ``node`` now (``nft mcchaos_<id>`` / ``iptables MCC-..``)."""
        r = self.node(node).script(firewall.LIST, "list our firewall rules")
        return [line.strip() for line in r.stdout.splitlines() if line.strip()]


def _ip_link(link: str, state: str) -> None:
    """The lab's fallback, run on the lab host (root): ``ip link set dev LINK up|down``."""
    cmd = ["ip", "link", "set", "dev", link, state]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeError("lab-host", f"`{' '.join(cmd)}` failed: {exc}") from None
    if done.returncode != 0:
        raise NodeError("lab-host", f"`{' '.join(cmd)}` exited {done.returncode}: "
                                    f"{done.stderr.strip()}")
