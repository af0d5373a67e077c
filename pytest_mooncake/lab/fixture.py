"""Pytest fixtures for a lab (not registered in the plugin yet; import them in a conftest).

    from pytest_mooncake.lab.fixture import mc_lab, mc_lab_fleet  # noqa: F401

``mc_lab`` (session): a 3-node reference lab under a name no other lab on the host uses (so
xdist workers and concurrent sessions never touch each other's); labs of earlier sessions whose
process is gone (SIGKILLed) are removed first. Skips with the probe's reason where namespaces
or sshd are not available, and for a Mooncake release where its environment cannot be
installed. ``mc_lab_fleet`` (function): the lab's ``Fleet``; after the test, every fault the
test left (partitions, paused or stopped components) is healed, and the test errors if one
could not be.
``make_lab_fixture(nodes=..., flavour=...)`` makes other shapes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_mooncake.lab.flavours import flavour_for
from pytest_mooncake.lab.host import LabError, probe
from pytest_mooncake.lab.netns_lab import Lab, sweep_stale, unused_name
from pytest_mooncake.nodes.fleet import Fleet


def lab_name(prefix: str = "t") -> str:
    """An unused lab name: ``prefix``, the xdist worker's number, a letter."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gwm")
    return unused_name((prefix + worker.removeprefix("gw"))[:5])


def make_lab_fixture(nodes: int = 3, flavour: str = "reference", prefix: str = "t",
                     **options: Any) -> Callable[..., Iterator[Lab]]:
    @pytest.fixture(scope="session")
    def lab_fixture() -> Iterator[Lab]:
        reason = probe()
        if reason:
            pytest.skip(f"no lab on this machine: {reason}")
        try:  # a release is installed into its cached environment on first use
            flav = flavour_for(flavour)
        except LabError as exc:
            pytest.skip(f"no {flavour} lab on this machine: the release's environment cannot "
                        f"be installed here: {exc}")
        lines: list[str] = []
        sweep_stale(progress=lines.append)
        for attempt in range(3):
            try:
                lab = Lab.up(nodes=nodes, name=lab_name(prefix), flavour=flav,
                             owner_pid=os.getpid(), progress=lines.append, **options)
                break
            except LabError as exc:  # another session took the name between choice and build
                if "exists" not in str(exc) or attempt == 2:
                    raise
        try:
            yield lab
        finally:
            problems = lab.down(progress=lines.append)
            if problems:
                raise RuntimeError(f"lab {lab.layout.name} left things behind: {problems}")

    return lab_fixture


mc_lab = make_lab_fixture()


@pytest.fixture
def mc_lab_fleet(mc_lab: Lab) -> Iterator[Fleet]:
    assert mc_lab.fleet is not None
    yield mc_lab.fleet
    failed = [o for o in mc_lab.fleet.heal() if not o.ok]
    if failed:
        raise RuntimeError("faults left by the test could not be healed: "
                           + "; ".join(f"{o.entry.id} {o.entry.fault}: {o.what}" for o in failed))
