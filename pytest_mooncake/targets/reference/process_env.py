"""The environment the reference engine's processes (engines, masters, store clients, metadata
servers) start with: their compiled bytecode kept in the plugin's cache.

A run with ``PYTHONDONTWRITEBYTECODE=1`` (set to keep source trees free of ``__pycache__``)
made every one of those processes compile ``reference_engine``, ``etcd3``'s generated protobuf
modules and their imports from source at each start: about 0.2 s of CPU per process, over 300
processes per run of the suites (docs/speed.md, "The reference engine's own knobs"). Their
bytecode goes to ``$MC_CACHE_DIR/pycache`` instead (``PYTHONPYCACHEPREFIX``), outside every
source tree, and is read from there by every later start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pytest_mooncake.runtime.native import cache_dir

FORKED_MODULES = (
    "reference_engine.__main__",
    "reference_engine.engine.engine_main",
    "reference_engine.master.master_main",
    "reference_engine.master.store_client_main",
    "reference_engine.metadata.metadata_server_main",
    "reference_engine.master.etcd_client",  # sets protobuf's pure-Python implementation first
    "reference_engine.etcd_connection",
    "etcd3",
    "etcd3.exceptions",
    "grpc",
)
"""What a fork server imports for the reference's processes (``--mc-fork-server=auto``): every
command's module and the etcd client, whose gRPC and protobuf import was most of a start."""
BYTECODE_CACHE = "pycache"
"""The directory below the plugin's cache that holds the reference processes' bytecode."""


def reference_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the reference processes' bytecode
    written to and read from the plugin's cache; a ``PYTHONPYCACHEPREFIX`` already set is
    kept."""
    env = dict(os.environ if base is None else base)
    if not env.get("PYTHONPYCACHEPREFIX"):
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir(BYTECODE_CACHE))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
