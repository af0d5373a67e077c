"""A multi-node Mooncake lab on one machine: nodes are network namespaces with their own
addresses (198.18.0.0/15) and an sshd each; etcd, masters and engines are started on them over
SSH through ``pytest_mooncake.nodes``, and a cluster file describes the result.
``python -m pytest_mooncake.lab up|down|status``; ``fixture.mc_lab`` does the same for tests."""

from pytest_mooncake.lab.host import LabError, probe
from pytest_mooncake.lab.netns_lab import Lab, down, status, sweep_stale

__all__ = ["Lab", "LabError", "down", "probe", "status", "sweep_stale"]
