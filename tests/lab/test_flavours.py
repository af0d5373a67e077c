"""Flavours describe components whose process match finds only their own process: the lab's
nodes share one process table, so a match that fits another node's command line would make
``state`` and ``heal`` report a dead master as running."""

from __future__ import annotations

import ipaddress
import re
import shlex

import pytest

from pytest_mooncake.lab.flavours import Flavour, flavour_for
from pytest_mooncake.lab.layout import LabLayout
from pytest_mooncake.releases.envs import find_env

RELEASE = "0.3.13.post1"


def flavours() -> list[Flavour]:
    found = [flavour_for("reference")]
    if find_env(RELEASE) is not None:
        found.append(flavour_for(RELEASE))
    return found


@pytest.mark.parametrize("flavour", flavours(), ids=lambda f: f.name)
def test_every_match_fits_its_own_command_line_only(flavour: Flavour) -> None:
    layout = LabLayout("fx", ipaddress.ip_network("198.18.9.0/24"), 12)
    nodes = layout.all_nodes()
    etcd = [f"{nodes[0].address}:2379"]
    placed = [flavour.master(n, etcd, "c") for n in nodes]
    placed += [flavour.engine(n, f"seg-{n.name}", 0, etcd) for n in nodes]
    placed += [flavour.client(n, f"client-{n.name}", 0, etcd, "c") for n in nodes]
    lines = {p.component.name: " ".join(shlex.split(p.component.start)[1:]) for p in placed}
    assert len(lines) == len(placed)
    for p in placed:
        if p.component.match is None:
            continue  # found by its pid file alone
        fits = [name for name, line in lines.items() if re.search(p.component.match, line)]
        assert fits == [p.component.name], (p.component.match, fits)
