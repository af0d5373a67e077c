"""The labels every container, network and volume of a run carries, and their removal."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

SESSION_LABEL = "pytest-mooncake.session"
OWNER_LABEL = "pytest-mooncake.owner-pid"
"""The pid of the process that made the object: an object whose owner is gone is an orphan."""


def session_labels(session: str, owner: int | None = None) -> dict[str, str]:
    return {SESSION_LABEL: session, OWNER_LABEL: str(owner or os.getpid())}


def list_containers(client: Any, filters: Mapping[str, Any]) -> list[Any]:
    """Every container (running or not) matching ``filters``, as the engine's listing gave it.

    Sparse: docker-py would otherwise inspect each listed container, and one that another run
    removes in between fails the whole listing (Podman answers 500 "no such container", not the
    404 docker-py's ``ignore_removed`` forgives: seen in CI). ``attrs`` holds ``Id``, ``Names``
    and ``Labels``."""
    return client.containers.list(all=True, filters=dict(filters), sparse=True)


def container_names(containers: list[Any]) -> list[str]:
    return [name.lstrip("/") for c in containers for name in (c.attrs.get("Names") or [])[:1]]


def remove_labelled(client: Any, filters: Mapping[str, Any]) -> list[str]:
    """Remove the containers, then networks, then volumes matching ``filters`` (docker API
    ``label=`` filters); returns what could not be removed, each with the engine's answer."""
    problems = []
    for kind, remove in (("container", lambda o: o.remove(force=True)),
                         ("network", lambda o: o.remove()),
                         ("volume", lambda o: o.remove(force=True))):
        collection = getattr(client, kind + "s")
        try:
            found = (list_containers(client, filters) if kind == "container"
                     else collection.list(filters=dict(filters)))
        except Exception as exc:  # noqa: BLE001 (report, keep removing the other kinds)
            problems.append(f"listing {kind}s: {exc}")
            continue
        for obj in found:
            try:
                remove(obj)
            except Exception as exc:  # noqa: BLE001 (already gone, or the engine refused)
                if "no such" not in str(exc).lower() and "not found" not in str(exc).lower():
                    problems.append(f"{kind} {getattr(obj, 'name', obj)}: {exc}")
    return problems


def remove_session(client: Any, session: str) -> list[str]:
    return remove_labelled(client, {"label": [f"{SESSION_LABEL}={session}"]})


def remove_orphans(client: Any) -> list[str]:
    """Remove what runs whose owner process is gone left behind (their keeper died too)."""
    owners: set[str] = set()
    for collection in (list_containers(client, {"label": [OWNER_LABEL]}),
                       client.networks.list(filters={"label": [OWNER_LABEL]})):
        for obj in collection:
            owner = (obj.attrs.get("Labels") or {}).get(OWNER_LABEL)
            if owner and owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                owners.add(owner)
    problems = []
    for owner in sorted(owners):
        problems += remove_labelled(client, {"label": [f"{OWNER_LABEL}={owner}"]})
    return problems
