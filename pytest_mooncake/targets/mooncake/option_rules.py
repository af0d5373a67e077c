"""The options a Mooncake-family target takes, and how each one it cannot honour is refused:
the same for every placement, so a suite run on local processes, containers or an existing
deployment is n/a (``TargetLacks``) or a usage error (``TypeError``) for the same reasons,
never silently run without the option."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.targets.base import Capability, TargetLacks

ENGINE_OPTIONS = ("buffer_size", "fixed_address", "ttl_ms", "profile", "ready_timeout")
"""``start_engine`` options a Mooncake engine understands (``ttl_ms`` needs cache_ttl,
``profile`` other than the build's own needs version_skew)."""
MASTER_OPTIONS = ("oplog", "snapshots", "trim_oplog_after_snapshot", "client_ttl", "lease_ttl",
                  "flags", "env", "cluster_id", "ready_timeout", "partial_restore")
"""``master_cluster`` options (``snapshots`` needs a means of the build's to write snapshots,
``master_cluster/snapshot_requests``, and the target's master_snapshot capability; ``lease_ttl`` is known, for
the reference target's sake, and refused: no Mooncake target sets it; ``partial_restore`` asks
for the restore MP-2 requires: a Mooncake build has one restore and no switch for it, so the
option is taken and the build's own restore is what runs and is judged)."""
MOONCAKE_ETCD_ROUTING = ("every mooncake_master this target starts gets the cluster's "
                         "--etcd_endpoints")


def lacks_etcd_routing(option: str, why: str) -> TargetLacks:
    """The refusal of per-master etcd routing (``master_etcd={i: address}`` or
    ``start_master(etcd=address)``) by a target without the means: the test is n/a with
    ``option`` named, instead of running with every master on the cluster's etcd."""
    return TargetLacks(Capability.MASTER_CLUSTER, (
        f"{option}: no per-master etcd routing ({why}; routing one master's etcd traffic, e.g. "
        f"through an mc_faults proxy, is a reference-target option)"))


def unknown_options(call: str, given: Mapping[str, Any], known: tuple[str, ...]) -> None:
    """``TypeError`` naming every option of ``call`` that no Mooncake target understands."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"{call}: unknown option(s) {', '.join(unknown)} for the Mooncake "
                        f"targets (known: {', '.join(known)})")


def check_master_options(options: Mapping[str, Any], build: str,
                         no_routing: str = MOONCAKE_ETCD_ROUTING) -> dict[str, Any]:
    """``options`` without an empty ``master_etcd``; refuses routing where ``no_routing`` says
    why the target has none (an empty reason: it routes, and ``master_etcd`` is kept), unknown
    options and a lease TTL before anything is started."""
    options = dict(options)
    routed = options.pop("master_etcd", None)
    if routed and no_routing:
        raise lacks_etcd_routing("master_etcd", no_routing)
    if routed:
        options["master_etcd"] = dict(routed)
    unknown_options("master_cluster", {k: v for k, v in options.items() if k != "master_etcd"},
                    MASTER_OPTIONS)
    options.pop("partial_restore", None)
    if options.get("lease_ttl") is not None:
        raise TargetLacks(Capability.MASTER_CLUSTER, (
            f"lease_ttl: the Mooncake targets do not set the leader lease TTL of {build}'s "
            f"masters (give the build's own flag through flags={{...}} where it has one)"))
    return options


def whole_seconds(value: Any, option: str) -> int:
    """0.3.13's TTL flags are int64 seconds: a fractional TTL is rounded up (never shortened);
    anything that is not a positive number is refused naming the option."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"master_cluster: {option} must be a positive number of seconds, "
                         f"got {value!r}")
    return math.ceil(value)
