"""``ReleaseFacts``: what one release has, probed from the release and cached with its environment.

    facts = facts_of(env)                         # static probes (--help, module, ELF strings)
    facts.master_flag("enable_oplog")             # Flag(type, default, ...) or None
    facts.snapshot_means                          # ["snapshot", "snapshot_restore"] or ["oplog_snapshot"]
    facts.reads_env("MC_TE_METADATA_REFRESH_INTERVAL_SECONDS")
    facts = facts_of(env, live=True, etcd="127.0.0.1:2379")   # + a started master and engines
    facts.descriptor_has("tcp_data_host"), facts.has_metric("master_key_count")

A probe that failed (timeout, crash) is never cached and never read as "absent": asking about
it raises ``ProbeFailed`` with what was seen. A live fact not probed yet raises ``NotProbed``.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.releases import probes
from pytest_mooncake.releases.gflags_help import Flag
from pytest_mooncake.releases.local_build import Build

PROBE_VERSION = 2
FACTS_FILE = "facts.json"
SECTIONS = ("static", "master", "master_ha", "engines")


def schema() -> str:
    """Changes whenever the family table or the probes change, invalidating cached facts."""
    text = repr((PROBE_VERSION, family.TABLE, sorted(family.SNAPSHOT_MEANS.items()),
                 family.CLIENT_TTL_FLAGS, {k: p.pattern for k, p in family.LOG_PATTERNS.items()}))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ProbeFailed(RuntimeError):
    """The probe that answers this question failed; the message says what was seen."""


class NotProbed(LookupError):
    """A live fact asked before the live probes ran (``facts_of(env, live=True, etcd=...)``)."""


class ReleaseFacts:
    """Probed facts of one release environment (see the module doc)."""

    def __init__(self, env: Build, data: Mapping[str, Any]):
        self.env = env
        self.data = dict(data)

    @property
    def label(self) -> str:
        return f"{self.env.distribution} {self.env.version}"

    def _section(self, name: str) -> Mapping[str, Any]:
        if name not in self.data:
            raise NotProbed(f"{self.label}: the {name} probe has not run (use "
                            f"facts_of(env, live=True, etcd=...))")
        return self.data[name]

    # ------------------------------------------------------------------------- master --help

    @property
    def master_flags(self) -> dict[str, Flag]:
        helped = self._section("static")["master_help"]
        if "error" in helped:
            raise ProbeFailed(f"{self.label}: mooncake_master --help failed: {helped['error']}")
        return {name: Flag(name=name, **spec) for name, spec in helped["flags"].items()}

    def master_flag(self, name: str) -> Flag | None:
        """The flag (type, default, description) when the release's master has it, else None."""
        return self.master_flags.get(name)

    @property
    def snapshot_means(self) -> list[str]:
        """Names of ``family.SNAPSHOT_MEANS`` whose flags the master has, all of them."""
        flags = self.master_flags
        return [means for means, needs in family.SNAPSHOT_MEANS.items()
                if all(n in flags for n in needs)]

    @property
    def client_ttl_flag(self) -> str | None:
        flags = self.master_flags
        return next((f for f in family.CLIENT_TTL_FLAGS if f in flags), None)

    def master_args(self, settings: Mapping[str, Any], required: tuple[str, ...] = ()
                    ) -> tuple[list[str], dict[str, str]]:
        """``mooncake_master`` argv for ``settings`` as this release spells them, and the
        settings left out with why (see ``probes.master_argv``)."""
        if self.env.master_binary is None:
            raise ProbeFailed(f"{self.label} ships no mooncake_master")
        return probes.master_argv(self.env.master_binary, self.master_flags, settings, required)

    # ------------------------------------------------------------------------- python, ELF

    def _api(self) -> Mapping[str, Any]:
        return self._section("static")["python_api"]

    def _methods(self, which: str) -> frozenset[str]:
        api = self._api()
        if f"{which}_error" in api or "error" in api:
            raise ProbeFailed(f"{self.label}: importing mooncake.{which} failed: "
                              f"{api.get(f'{which}_error') or api.get('error')}")
        return frozenset(api.get(f"{which}_methods", ()))

    @property
    def engine_methods(self) -> frozenset[str]:
        return self._methods("engine")

    @property
    def store_methods(self) -> frozenset[str]:
        return self._methods("store")

    def reads_env(self, name: str) -> bool:
        """Whether ``name`` is stored in the release's ELF files, i.e. the release can read it
        (a name that is not there is certainly never read)."""
        return name in self._section("static")["env_vars"]

    # ------------------------------------------------------------------------- live

    def _live(self, section: str) -> Mapping[str, Any]:
        got = self._section(section)
        if "error" in got and not got.get("started", got.get("round_trip")):
            raise ProbeFailed(f"{self.label}: the {section} probe failed: {got['error']}")
        return got

    @property
    def master_starts(self) -> bool:
        return bool(self._section("master").get("started"))

    @property
    def ha_master_starts(self) -> bool:
        return bool(self._section("master_ha").get("started"))

    @property
    def metrics(self) -> frozenset[str]:
        return frozenset(self._live("master").get("metrics", ()))

    def has_metric(self, name: str) -> bool:
        return name in self.metrics

    def admin_status(self, path: str) -> int | None:
        """HTTP status a started master gave for GET ``path`` (a family table row)."""
        admin = self._live("master").get("admin", {})
        if path not in admin:
            raise KeyError(f"{path} is not an admin endpoint of the family table")
        return admin[path]

    def has_admin_endpoint(self, path: str) -> bool:
        status = self.admin_status(path)
        if status is None:
            raise ProbeFailed(f"{self.label}: GET {path} got no answer from a started master")
        return status != 404

    @property
    def config_echo_keys(self) -> frozenset[str]:
        return frozenset(self._live("master").get("config_echo_keys", ()))

    @property
    def descriptor_fields(self) -> frozenset[str]:
        return frozenset(self._live("engines").get("descriptor_fields", ()))

    def descriptor_has(self, field: str) -> bool:
        return field in self.descriptor_fields

    @property
    def round_trip(self) -> bool:
        return bool(self._section("engines").get("round_trip"))

    # ------------------------------------------------------------------------- reporting

    def lacks(self, kind: str, name: str) -> str:
        """A probed reason for an n/a: ``mooncake-... 0.3.11.post1 has no master flag
        --enable_oplog (probed: mooncake_master --help (gflags))``."""
        what = {"master_flag": f"master flag --{name}", "metric": f"metric {name}",
                "admin_endpoint": f"admin endpoint {name}", "env_var": f"environment variable {name}",
                "descriptor_field": f"descriptor field {name}", "log_line": f"log line {name}",
                "engine_method": f"TransferEngine.{name}", "store_method":
                f"MooncakeDistributedStore.{name}"}[kind]
        return f"{self.label} has no {what} (probed: {family.PROBES[kind]})"

    def present(self, kind: str, name: str) -> bool | None:
        """Whether the release has the table row ``(kind, name)``; None where not probed or the
        probe failed."""
        ask = {
            "master_flag": lambda: self.master_flag(name) is not None,
            "metric": lambda: self.has_metric(name),
            "admin_endpoint": lambda: self.has_admin_endpoint(name),
            "descriptor_field": lambda: self.descriptor_has(name),
            "env_var": lambda: self.reads_env(name),
            "engine_method": lambda: name in self.engine_methods,
            "store_method": lambda: name in self.store_methods,
            "log_line": lambda: name in self._live("master").get("log", {}),
        }[kind]
        try:
            return ask()
        except (NotProbed, ProbeFailed):
            return None

    def table(self) -> list[tuple[family.Row, bool | None]]:
        return [(row, self.present(row.kind, row.name)) for row in family.TABLE]


# ----------------------------------------------------------------------------- cache

_memo: dict[Path, ReleaseFacts] = {}


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == schema() else {}


def _save(path: Path, data: Mapping[str, Any]) -> None:
    """Atomically, and only probes that succeeded (a failure is retried next time)."""
    keep = {k: v for k, v in data.items() if not _failed(k, v)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:6]}")
    tmp.write_text(json.dumps(keep, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _failed(section: str, value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if section == "static":
        return "error" in value.get("master_help", {}) or "error" in value.get("python_api", {})
    if section in ("master", "master_ha"):
        return "error" in value
    if section == "engines":
        return "error" in value
    return False


def facts_of(env: Build, *, live: bool = False, etcd: str | None = None,
             refresh: bool = False, workdir: Path | None = None) -> ReleaseFacts:
    """Facts of ``env``: static probes always; with ``live`` a started master too; with
    ``etcd`` (``HOST:PORT``) also an HA master and an engine round trip on that etcd.
    Cached in the environment (``facts.json``) and per process; ``refresh`` probes again."""
    path = env.root / FACTS_FILE
    cached = None if refresh else _memo.get(env.root)
    data = dict(cached.data) if cached else ({} if refresh else _load(path))
    data["schema"] = schema()
    changed = False
    if "static" not in data:
        data["static"] = probes.static(env)
        changed = True
    if (live or etcd) and "master" not in data:
        data["master"] = probes.master(env, _flags_or_empty(data), workdir=workdir)
        changed = True
    if etcd and "master_ha" not in data:
        data["master_ha"] = probes.master(env, _flags_or_empty(data), etcd=etcd, workdir=workdir)
        changed = True
    if etcd and "engines" not in data:
        data["engines"] = probes.engines(env, etcd, workdir=workdir)
        changed = True
    if changed:
        _save(path, data)
    facts = ReleaseFacts(env, data)
    _memo[env.root] = facts
    return facts


def _flags_or_empty(data: Mapping[str, Any]) -> Mapping[str, Any]:
    return data["static"]["master_help"].get("flags", {})
