"""The Mooncake family: real Mooncake builds under test, as one adapter over placements.

- ``adapter.py``: ``MooncakeFamilyTarget``, the one Target (options, capabilities, factories);
  ``option_rules.py``: which options exist and how an unhonoured one is refused;
- ``placements/``: where components live (this host, containers, an existing deployment);
- ``deployment/``: the handles of an existing deployment, driven over SSH;
- ``driver/``: the driver process running the build's Python API, and its control channel;
- ``master_cluster/``: HA ``mooncake_master`` processes, their admin service, flags, snapshots, OpLog;
- beside them: ``store_clients.py`` (the store-client launcher), ``metadata_stores.py`` (etcd
  and HTTP metadata), ``launchers.py`` (how a process is started: this host or a container),
  ``install.py`` (where a build lives), ``cache_knobs.py``, ``mooncake_log.py``;
- what a column deployed: ``profile_strategies.py`` (the named deployment profiles,
  ``@defaults``/``@ha-oplog``/``@ha-oplog-short-lease``/``@ha-snapshot``),
  ``judged_configuration.py`` (the record of flags, env and backends a column was judged
  under), ``backend_probes.py`` (which metadata and HA backends a build accepts, asked in the
  run);
- the RDMA path: ``verbs_layers.py`` (emulated or host devices), ``emulated_rdma.py`` (the RDMA
  handle), ``explored_rdma.py`` (schedules explored at the verbs boundary), ``memcheck.py``
  (engines under valgrind).

The public classes are importable from here (``from pytest_mooncake.targets.mooncake import
MooncakeTarget``); the modules behind them may move.
"""

from __future__ import annotations

from typing import Any

_PUBLIC = {
    "MooncakeFamilyTarget": "pytest_mooncake.targets.mooncake.adapter",
    "MooncakeInstall": "pytest_mooncake.targets.mooncake.install",
    "MooncakeTarget": "pytest_mooncake.targets.mooncake.placements.this_host",
    "DockerTarget": "pytest_mooncake.targets.mooncake.placements.containers",
    "ClusterTarget": "pytest_mooncake.targets.mooncake.placements.existing_cluster",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public class on first use, so importing the family pulls no placement in."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # noqa: PLC0415

    return getattr(importlib.import_module(module), name)
