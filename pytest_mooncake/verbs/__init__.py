"""Emulated RDMA devices: a libibverbs.so.1 in C that real Mooncake builds load instead of
rdma-core's, with real RC semantics between processes on one host, and a control socket per
process to hold, fail and reorder completions.

- ``EmulatedFabric`` (fabric.py): a run directory of devices and the environment to use them;
- ``VerbsControl`` (control.py): the client of a process's control socket;
- ``DeviceSpec`` (devices.py): what one emulated device looks like;
- ``SchedulingPoints`` (points.py), ``BoundaryScheduler`` (boundary_scheduler.py) and
  ``explore``/``replay`` (boundary_exploration.py): each verbs call a scheduling point, schedules
  explored with the reference scheduler's strategies and replayed from tokens
  (docs/rdma-exploration.md);
- ``library_path()`` (library.py): the built library, with a stub libmlx5.so.1 beside it (releases
  that link libmlx5 load it instead of the machine's, which needs the real libibverbs);
- ``python -m pytest_mooncake.verbs``: the same by hand (cli.py).
"""

from pytest_mooncake.verbs.control import (
    Counters,
    HeldCompletion,
    PostedWr,
    ProcessGone,
    RetiredQp,
    ThreadActivity,
    VerbsControl,
    VerbsControlError,
)
from pytest_mooncake.verbs.devices import DeviceSpec, DeviceSpecError, parse_devices
from pytest_mooncake.verbs.fabric import EmulatedFabric
from pytest_mooncake.verbs.library import VerbsBuildError, library_path

__all__ = [
    "Counters", "DeviceSpec", "DeviceSpecError", "EmulatedFabric", "HeldCompletion", "PostedWr",
    "ProcessGone", "RetiredQp", "ThreadActivity", "VerbsBuildError", "VerbsControl",
    "VerbsControlError", "library_path", "parse_devices",
]
