"""pytest-mooncake: conformance and chaos testing for Mooncake.

This module is the plugin registered by the ``pytest11`` entry point *and* by
``pytest -p pytest_mooncake``; both register it under the same name, so it is
never loaded twice. It stays import-light: the hook and fixture modules are
listed in ``pytest_plugins`` and loaded by pytest only when the plugin is active.
"""

__version__ = "0.1.0"

pytest_plugins = [
    "pytest_mooncake.plugin",
    "pytest_mooncake.etcd",
    "pytest_mooncake.faults",
    "pytest_mooncake.engines",
    "pytest_mooncake.masters",
    "pytest_mooncake.completions",
    "pytest_mooncake.chaos.fixtures",
    "pytest_mooncake.skew",
]
