"""How one build's ``mooncake_master`` spells the settings the family passes it, from the build's
own ``--help`` (``releases.ReleaseFacts``): no flag is passed that the build does not list, so a
release without ``--enable_oplog`` or ``--metrics_host`` (0.3.10-0.3.12) never dies with
"ERROR: unknown command line flag" inside a test.

A setting is *required* (the family cannot run masters without it: a ``TargetLacks`` naming
the probed absence), *wanted* (passed where the build has it, left out and recorded where not:
``--metrics_host`` on a build without it binds the admin port on every address), or *asked for*
by the test (``client_ttl``, ``oplog=True``, ``flags={...}``: refused with ``TargetLacks`` naming
the flag when the build lacks it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_mooncake.releases import ReleaseFacts
from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.releases.probes import master_argv
from pytest_mooncake.targets.base import Capability, TargetLacks

REQUIRED = ("enable_ha", "etcd_endpoints", "cluster_id", "rpc_port", "metrics_port")
"""Settings without which the family's HA masters cannot run or be observed."""


class MasterFlags:
    """The master flags of one build, and how the family's settings become its argv."""

    def __init__(self, flags: Mapping[str, Any], build: str, source: str,
                 facts: ReleaseFacts | None = None):
        self.flags = dict(flags)
        self.build = build
        self.source = source
        """How the flags were learned, for messages (``mooncake_master --help``)."""
        self.facts = facts

    @classmethod
    def of(cls, facts: ReleaseFacts) -> MasterFlags:
        """The flags a build's ``mooncake_master --help`` lists (``ProbeFailed`` when it could
        not be asked)."""
        return cls(facts.master_flags, facts.label, family.PROBES["master_flag"], facts)

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def lacks(self, flag: str) -> str:
        return f"{self.build} has no master flag --{flag} (probed: {self.source})"

    @property
    def client_ttl_flag(self) -> str | None:
        """The client TTL flag this build has, preferred first (0.3.14 ``--client_active_ttl_sec``
        with ``--client_ttl`` as alias; older builds ``--client_ttl``)."""
        return next((f for f in family.CLIENT_TTL_FLAGS if f in self.flags), None)

    def refuse_missing(self, asked: Mapping[str, Any], why: str) -> None:
        """``TargetLacks`` for the first flag of ``asked`` (given by the test) the build lacks."""
        for flag in asked:
            if flag not in self.flags:
                raise TargetLacks(Capability.MASTER_CLUSTER, f"{why}: {self.lacks(flag)}")

    def argv(self, binary: str, settings: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
        """``binary`` and ``--flag=value`` for each setting this build has; the settings left
        out, with why. A missing required setting is ``TargetLacks``."""
        missing = [s for s in REQUIRED if s in settings and
                   not any(f in self.flags for f in _spellings(s))]
        if missing:
            raise TargetLacks(Capability.MASTER_CLUSTER, "HA masters of the Mooncake family "
                              "need " + "; ".join(self.lacks(s) for s in missing))
        argv, dropped = master_argv(binary, self.flags, settings)  # type: ignore[arg-type]
        return [binary, *argv[1:]], dropped


def _spellings(setting: str) -> tuple[str, ...]:
    return ("rpc_port", "port") if setting == "rpc_port" else (setting,)
