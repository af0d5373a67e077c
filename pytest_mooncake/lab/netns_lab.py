"""A lab: N nodes on this machine (network namespaces with an sshd each), with etcd, masters and
engines started on them over SSH, and the cluster file that describes it.

``Lab.up`` builds in order (network, sshd, cluster file, components) and, if anything fails or
is interrupted, tears down what it built before re-raising. The state file is written before
the first namespace exists, so ``down`` finds everything of a lab whose builder was SIGKILLed;
names carry the lab's name for the same reason (``layout``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_mooncake.lab import host, network, sshd
from pytest_mooncake.lab.clusterfile import Plan, Topology, plan, write
from pytest_mooncake.lab.flavours import Flavour, Placed, flavour_for
from pytest_mooncake.lab.host import LabError
from pytest_mooncake.lab.layout import LabLayout, check_name, state_root, subnets
from pytest_mooncake.nodes.fleet import Fleet
from pytest_mooncake.runtime.deadlines import Timeout, wait_until
from pytest_mooncake.runtime.loopback_http import http_request

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _root_lock() -> Iterator[None]:
    """Serialises lab creation and removal on this host (subnet choice, names)."""
    root = state_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def read_state(name: str) -> dict[str, Any] | None:
    path = state_root() / name / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def known_labs() -> list[str]:
    """Every lab with a state directory or something on the host."""
    root = state_root()
    names = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    return sorted(names | network.lab_names_on_host())


def unused_name(prefix: str) -> str:
    """A lab name starting with ``prefix`` that no lab uses now (two test sessions on one host
    must not replace each other's labs). Callers retry on LabError if another took it first."""
    taken = set(known_labs())
    for suffix in "abcdefghijklmnopqrstuvwxyz0123456789":
        name = (prefix[:5] + suffix)
        if name not in taken:
            return check_name(name)
    raise LabError(f"every lab name {prefix[:5]}? is taken; `lab down --all`")


def _owner_alive(state: dict[str, Any] | None) -> bool:
    pid = (state or {}).get("owner_pid")
    if not pid:
        return True  # a lab made by the CLI lives until `lab down`
    return os.path.exists(f"/proc/{pid}")


@dataclass
class Lab:
    layout: LabLayout
    flavour: Flavour
    topology: Topology
    plan: Plan | None = None
    fleet: Fleet | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def cluster_file(self) -> Path:
        return self.layout.cluster_file

    # ------------------------------------------------------------------ up

    @classmethod
    def up(cls, nodes: int = 3, name: str = "lab", flavour: str | Flavour = "reference",
           masters: int | None = None, etcd: int = 1, engines: bool = True,
           clients: bool = True, owner_pid: int | None = None, replace: bool = False,
           progress: Progress = _stderr) -> Lab:
        """Build and start a lab; returns it with ``fleet`` open on its cluster file.

        ``replace``: remove an existing lab of this name first (the fixture's way to clear a
        SIGKILLed run's leftovers); without it an existing lab is an error."""
        reason = host.probe()
        if reason:
            raise LabError(f"cannot build a lab here: {reason}")
        check_name(name)
        topo = Topology(etcd, min(2, nodes) if masters is None else masters, engines,
                        clients).check(nodes)
        flav = flavour_for(flavour, progress) if isinstance(flavour, str) else flavour
        started = time.monotonic()
        with _root_lock():
            if read_state(name) is not None or network.leftovers(name):
                if not replace:
                    raise LabError(f"lab {name!r} exists (state {state_root() / name}); run "
                                   f"`python -m pytest_mooncake.lab down --name {name}` first")
                _remove(name, progress)
            foreign = network.range_in_use()
            if foreign:
                raise LabError("the lab's address range 198.18.0.0/15 is in use on this host "
                               "outside any lab: " + ", ".join(f"{u.network} on {u.interface}"
                                                               for u in foreign)
                               + "; refusing to build (remove it, or run the lab elsewhere)")
            layout = LabLayout(name, _free_subnet(), nodes)
            layout.dir.mkdir(parents=True, exist_ok=True)
            layout.dir.chmod(0o700)
            lab = cls(layout, flav, topo)
            lab._save("building", owner_pid)
        try:
            lab._build(progress)
        except BaseException:
            progress(f"lab {name}: build failed or interrupted; removing what was built")
            _remove(name, progress)
            raise
        lab._save("up", owner_pid)
        lab.timings["total"] = time.monotonic() - started
        progress(f"lab {name}: up in {lab.timings['total']:.1f}s ({nodes} nodes, "
                 f"{layout.subnet}, {flav.name}); cluster file {layout.cluster_file}")
        return lab

    def _save(self, status: str, owner_pid: int | None) -> None:
        lay = self.layout
        state = {"name": lay.name, "subnet": str(lay.subnet), "nodes": lay.nodes,
                 "status": status, "owner_pid": owner_pid, "created": time.time(),
                 "flavour": self.flavour.name, "cluster_file": str(lay.cluster_file),
                 "privsep_created": getattr(self, "_privsep_created", False)}
        tmp = lay.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(lay.state_file)

    def _step(self, what: str, progress: Progress) -> Callable[[], None]:
        t0 = time.monotonic()

        def done() -> None:
            self.timings[what] = time.monotonic() - t0
            progress(f"lab {self.layout.name}: {what} {self.timings[what]:.2f}s")
        return done

    def _build(self, progress: Progress) -> None:
        lay = self.layout
        done = self._step("network", progress)
        network.build_bridge(lay)
        for node in lay.all_nodes():
            network.build_node(lay, node)
        done()

        done = self._step("sshd", progress)
        self._privsep_created = sshd.ensure_privsep_dir()
        sshd.prepare_client(lay)
        known = [sshd.prepare_node(lay, n) for n in lay.all_nodes()]
        lay.known_hosts.write_text("\n".join(known) + "\n")
        for n in lay.all_nodes():
            sshd.start(n)
        deadline = time.monotonic() + 15
        for n in lay.all_nodes():
            sshd.wait_listening(n, deadline)
        done()

        self.plan = plan(lay, self.flavour, self.topology)
        spec = write(lay.cluster_file, self.plan.document)
        self.fleet = Fleet(spec, run=f"lab-{lay.name}")

        done = self._step("etcd", progress)
        self._start_all(self.plan.etcd)
        done()
        done = self._step("masters", progress)
        self._start_all(self.plan.services + self.plan.masters)
        if self.plan.clients:
            wait_leader([m.entry["admin"] for m in self.plan.masters], 60.0)
        done()
        done = self._step("engines+clients", progress)
        self._start_all(self.plan.engines + self.plan.clients)
        done()

    def _start_all(self, placed: list[Placed]) -> None:
        """Start components at once over SSH; the first failure is raised (after all ended)."""
        if not placed:
            return
        assert self.fleet is not None
        fleet = self.fleet
        with ThreadPoolExecutor(max_workers=len(placed)) as pool:
            futures = [pool.submit(fleet.node(p.component.node).start, p.component.name)
                       for p in placed]
            errors = [f.exception() for f in futures]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    # ------------------------------------------------------------------ down / status

    def down(self, progress: Progress = _stderr) -> list[str]:
        if self.fleet is not None:
            self.fleet.close(heal=False)
            self.fleet = None
        return down(self.layout.name, progress)


def wait_leader(admins: list[str], timeout: float) -> str:
    """Wait until one of the masters' admin services says it serves (store clients attach
    only to a serving leader); returns its admin URL."""
    def serving() -> str | None:
        for admin in admins:
            try:
                answer = http_request("GET", admin + "/health", timeout=2.0)
                if answer.status == 200 and answer.json().get("service_ready") is True:
                    return admin
            except (OSError, ValueError, AttributeError):
                continue
        return None

    try:
        return wait_until(serving, timeout, f"a serving leader among {', '.join(admins)}")
    except Timeout as exc:
        raise LabError(str(exc)) from None


def _free_subnet() -> Any:
    taken = network.subnets_on_bridges()
    for name in known_labs():
        state = read_state(name)
        if state:
            taken.add(state["subnet"])
    for net in subnets():
        if str(net) not in taken:
            return net
    raise LabError("every /24 of 198.18.0.0/15 is taken by a lab; `lab down --all`")


def _remove(name: str, progress: Progress) -> list[str]:
    """Remove lab ``name``: processes, namespaces, links, bridge, files. Returns problems."""
    t0 = time.monotonic()
    check_name(name)
    state = read_state(name)
    problems = network.tear_down(name)
    lab_dir = state_root() / name
    if lab_dir.is_dir() and lab_dir.parent == state_root():
        shutil.rmtree(lab_dir, ignore_errors=True)
        if lab_dir.exists():
            problems.append(f"could not remove {lab_dir}")
    if state and state.get("privsep_created") and not [n for n in known_labs() if n != name]:
        try:
            sshd.PRIVSEP_DIR.rmdir()
        except OSError:
            pass
    progress(f"lab {name}: down in {time.monotonic() - t0:.2f}s"
             + (f"; problems: {problems}" if problems else ""))
    return problems


def down(name: str, progress: Progress = _stderr) -> list[str]:
    """Remove lab ``name`` (whatever is left of it); the state root too when no lab is left."""
    with _root_lock():
        problems = _remove(name, progress)
        last = not known_labs()
    if last:
        _remove_root()
    return problems


def _remove_root() -> None:
    """The state root holds only the lock file once the last lab is gone: remove both. (A
    process that opened the lock meanwhile holds the unlinked file and recreates the root.)"""
    root = state_root()
    try:
        (root / ".lock").unlink(missing_ok=True)
        root.rmdir()
    except OSError:
        pass


def sweep_stale(progress: Progress = _stderr) -> list[str]:
    """Remove labs whose owning process (a test session) is gone; returns their names."""
    removed = []
    with _root_lock():
        for name in known_labs():
            state = read_state(name)
            if state is None or not _owner_alive(state):
                _remove(name, progress)
                removed.append(name)
    return removed


def status(name: str) -> dict[str, Any]:
    """What exists of lab ``name`` now: state, namespaces, processes per node, sshd."""
    state = read_state(name) or {}
    left = network.leftovers(name)
    nodes = {}
    for ns in left.namespaces:
        nodes[ns] = {"pids": host.netns_pids(ns)}
    return {"name": name, "state": state, "owner_alive": _owner_alive(state) if state else None,
            "namespaces": nodes, "links": left.links}
