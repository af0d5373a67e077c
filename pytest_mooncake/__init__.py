"""pytest-mooncake: conformance and chaos testing for Mooncake.

This module is the plugin registered by the ``pytest11`` entry point *and* by
``pytest -p pytest_mooncake``; both register it under the same name, so it is
never loaded twice. It stays import-light: the hook and fixture modules are
listed in ``pytest_plugins`` and loaded by pytest only when the plugin is active.
"""

import os

__version__ = "0.1.0"

# The plugin forks engines, masters and etcd while the test process holds gRPC channels (etcd3).
# gRPC's fork handlers restart its poller in the child, where close_fds has closed the epoll fd,
# and grpcio 1.80+ then aborts the child before exec now and then (grpc/grpc#43055). Children
# exec at once and never use the parent's channels, so the handlers are turned off; this must
# happen before gRPC is first imported, which loading the plugin precedes.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = [
    "pytest_mooncake.plugin",
    "pytest_mooncake.fixtures.target_session",
    "pytest_mooncake.fixtures.etcd_store",
    "pytest_mooncake.fixtures.redis_store",
    "pytest_mooncake.fixtures.network_faults",
    "pytest_mooncake.fixtures.engine_factories",
    "pytest_mooncake.fixtures.master_clusters",
    "pytest_mooncake.fixtures.rdma_completions",
    "pytest_mooncake.fixtures.chaos_runs",
    "pytest_mooncake.fixtures.version_skew",
]
