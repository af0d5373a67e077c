"""Deployment profiles: how one Mooncake build is deployed for a matrix column. A verdict holds
for a build *and* the flags it ran with (with ``--enable_oplog`` off a promoted standby of
0.3.13/0.3.14 serves 0 keys; on, every key), so the profile is part of the target:
``--mc-target=mooncake==0.3.13.post1@defaults``.

Each profile is a strategy object that says which master settings and environment it adds to
what every HA cluster of the family gets (``--enable_ha``, the run's etcd, a cluster id, ports
bound to loopback: ``master_cluster/ha_processes``). What a test asks for itself
(``oplog=...``, ``snapshots=True``, ``client_ttl``, ``flags={...}``) still wins over the
profile, and the recorded deployment says which tests may add what."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pytest_mooncake.targets.mooncake.master_cluster.flags import MasterFlags
from pytest_mooncake.targets.mooncake.master_cluster.snapshot_requests import (
    LOCAL_PATH_ENV,
    PeriodicSnapshots,
)

SUFFIX = re.compile(r"^(?P<base>.+)@(?P<profile>[a-z][a-z0-9-]*)$")
"""``SPEC@PROFILE``: a profile name is lower-case words joined by ``-`` (a docker digest,
``IMAGE@sha256:...``, is not one)."""


class UnknownProfile(ValueError):
    """``@PROFILE`` names no profile, or a target that has none; the message lists them."""


class DeploymentProfile:
    """One way to deploy a build: the master settings and environment it adds."""

    name: str
    summary: str

    def master_settings(self, flags: MasterFlags, oplog: bool | None) -> dict[str, Any]:
        """Settings (by setting name) beyond the HA base; ``oplog`` is what the test asked
        (None: nothing)."""
        raise NotImplementedError

    def master_env(self, workdir: Path) -> dict[str, str]:
        return {}

    def lacks(self, flags: MasterFlags) -> str | None:
        """Why this build cannot be deployed so (None: it can)."""
        return None

    def flag_text(self, flags: MasterFlags | None) -> str:
        """The profile in one phrase, as the build spells it (``--enable_oplog=true``)."""
        settings = self.master_settings(flags, None) if flags is not None else {}
        if flags is None or not settings:
            return self.summary
        argv, _ = flags.argv("mooncake_master", settings)
        return " ".join(argv[1:]) or self.summary

    def describe(self, flags: MasterFlags | None) -> dict[str, Any]:
        """The profile as the report records it: its flags as this build spells them, the
        settings the build has no flag for, the environment."""
        out: dict[str, Any] = {"name": self.name, "summary": self.summary,
                               "in_one_line": self.flag_text(None)}
        if flags is None:
            return out
        why = self.lacks(flags)
        if why:
            return {**out, "lacks": why}
        settings = self.master_settings(flags, None)
        argv, dropped = flags.argv("mooncake_master", settings)
        out["master_flags"] = argv[1:]
        if dropped:
            out["master_flags_not_passed"] = dropped
        env = self.master_env(Path("<cluster workdir>"))
        if env:
            out["master_env"] = env
        out["in_one_line"] = self.flag_text(flags)
        return out


class BuildDefaults(DeploymentProfile):
    """HA on as an operator turns it on (``--enable_ha`` and etcd), everything else the build's
    own default: no ``--enable_oplog``, no snapshots."""

    name = "defaults"
    summary = "the build's own defaults, HA on (--enable_ha and etcd); no --enable_oplog"

    def master_settings(self, flags: MasterFlags, oplog: bool | None) -> dict[str, Any]:
        return {} if oplog is None else {"enable_oplog": bool(oplog)}

    def flag_text(self, flags: MasterFlags | None) -> str:
        return "defaults (no --enable_oplog)"


class HaOplog(DeploymentProfile):
    """What the suites have always used: standbys follow the leader through the OpLog in etcd
    (``--enable_oplog=true`` where the build has the flag; 0.3.10-0.3.12 have none)."""

    name = "ha-oplog"
    summary = "HA on etcd with --enable_oplog=true where the build has the flag"

    def master_settings(self, flags: MasterFlags, oplog: bool | None) -> dict[str, Any]:
        if oplog is None and not flags.has("enable_oplog"):
            return {}
        return {"enable_oplog": True if oplog is None else bool(oplog)}

    def flag_text(self, flags: MasterFlags | None) -> str:
        if flags is not None and not flags.has("enable_oplog"):
            return "this build has no --enable_oplog: the HA base alone"
        return super().flag_text(flags)


class HaOplogShortLease(HaOplog):
    """``ha-oplog`` with the leader's etcd lease at the shortest the build accepts: a failover
    waits one lease for the dead leader's key to lapse and one more while the new leader warms
    up, so a 2 s lease takes about 6 s off each crash failover and 3 s off each cluster's first
    election (docs/speed.md). Only builds with ``--ha_leader_lease_ttl_sec`` (0.3.14: 2-60 s,
    default 5); the earlier releases compile their 5 s in."""

    name = "ha-oplog-short-lease"
    LEASE_FLAG = "ha_leader_lease_ttl_sec"
    LEASE_SECONDS = 2
    summary = (f"ha-oplog with --{LEASE_FLAG}={LEASE_SECONDS} (the shortest leader lease the "
               f"build accepts; builds with that flag only)")

    def lacks(self, flags: MasterFlags) -> str | None:
        if flags.has(self.LEASE_FLAG):
            return None
        return f"profile {self.name}: {flags.lacks(self.LEASE_FLAG)}"

    def master_settings(self, flags: MasterFlags, oplog: bool | None) -> dict[str, Any]:
        return {**super().master_settings(flags, oplog), self.LEASE_FLAG: self.LEASE_SECONDS}

    def flag_text(self, flags: MasterFlags | None) -> str:
        return DeploymentProfile.flag_text(self, flags)


class HaSnapshot(DeploymentProfile):
    """Snapshot-only restore: no OpLog; the serving master writes periodic snapshots to the
    local object store and a master restores the newest one (``--enable_snapshot_restore``,
    0.3.13 and earlier builds that list it)."""

    name = "ha-snapshot"
    summary = ("HA on etcd, --enable_oplog=false, periodic snapshots restored by a new leader "
               "(--enable_snapshot --enable_snapshot_restore, local object store)")
    means = PeriodicSnapshots()

    def lacks(self, flags: MasterFlags) -> str | None:
        missing = [f for f in self.means.flags if not flags.has(f)]
        if not missing:
            return None
        return (f"profile {self.name}: " + "; ".join(flags.lacks(f) for f in missing))

    def master_settings(self, flags: MasterFlags, oplog: bool | None) -> dict[str, Any]:
        settings: dict[str, Any] = {}
        if oplog is not None or flags.has("enable_oplog"):
            settings["enable_oplog"] = bool(oplog)
        return {**settings, **self.means.settings()}

    def master_env(self, workdir: Path) -> dict[str, str]:
        return {LOCAL_PATH_ENV: str(workdir / "snapshots")}


PROFILES: dict[str, DeploymentProfile] = {p.name: p for p in (BuildDefaults(), HaOplog(),
                                                              HaOplogShortLease(),
                                                              HaSnapshot())}
DEFAULT_PROFILE = "ha-oplog"
"""The profile of a target named without ``@PROFILE``: the suites' settings, so a column named
as before judges what it judged before."""


def known_profiles_text() -> str:
    return "; ".join(f"{name} ({p.summary})" for name, p in PROFILES.items())


def split_profile(spec: str) -> tuple[str, str | None]:
    """``SPEC@PROFILE`` -> (SPEC, PROFILE); a spec without one -> (spec, None)."""
    match = SUFFIX.match(spec.strip())
    if match is None:
        return spec.strip(), None
    return match["base"], match["profile"]


def profile_named(name: str | None, spec: str = "") -> DeploymentProfile:
    """The profile ``name`` names (the default for None); ``UnknownProfile`` listing the
    known ones otherwise."""
    if name is None:
        return PROFILES[DEFAULT_PROFILE]
    if name not in PROFILES:
        where = f"--mc-target={spec}: " if spec else ""
        raise UnknownProfile(f"{where}unknown deployment profile {name!r}; known profiles: "
                             f"{known_profiles_text()}")
    return PROFILES[name]


def label_suffix(profile: DeploymentProfile) -> str:
    """What a column label adds for ``profile``: nothing for the default one."""
    return "" if profile.name == DEFAULT_PROFILE else f"@{profile.name}"


def profile_of_label(label: str) -> tuple[str, str]:
    """A column label -> (the build it judges, the profile name), for reports."""
    base, name = split_profile(label)
    return base, name or DEFAULT_PROFILE
