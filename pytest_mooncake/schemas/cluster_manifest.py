"""The manifest of an existing deployment (``--mc-target=cluster:FILE``;
``pytest_mooncake/data/clusters/example.toml`` documents every field)::

    [cluster]   name, version                 (optional; the report header shows them)
    [etcd]      endpoints = ["host:port", ...]
    [[masters]] admin = "http://host:port"    (mooncake_master --metrics_port); rpc = "host:port"
    [[engines]] segment, control = "host:port" (a driver's control socket); aliases = [...]
    [toxiproxy] url = "http://host:port"; [toxiproxy.proxies] NAME = "host:port"
    [faults]    allow = ["observe", "transfers", "metadata_writes", "metadata_faults"]

``load_manifest`` validates it (``SchemaError`` naming the file and the field) and returns the
``Manifest`` the cluster target works from.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from pytest_mooncake.schemas.shipped_files import NotShipped, find
from pytest_mooncake.schemas.toml_documents import SchemaError, load, problem

PERMISSIONS = ("observe", "transfers", "metadata_writes", "metadata_faults")
_HOSTPORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


class ManifestError(SchemaError):
    """The manifest is unusable; the message names the file and the field."""


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


def _hostport(value: str) -> str:
    text = _non_empty(value)
    m = _HOSTPORT.match(text)
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return text


def _url(value: str) -> str:
    text = _non_empty(value)
    parsed = urllib.parse.urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def _permission(value: str) -> str:
    if value not in PERMISSIONS:
        raise ValueError(f"unknown permission {value!r} (known: {', '.join(PERMISSIONS)})")
    return value


NonEmpty = Annotated[str, AfterValidator(_non_empty)]
HostPort = Annotated[str, AfterValidator(_hostport)]
Url = Annotated[str, AfterValidator(_url)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterTable(_Table):
    name: NonEmpty | None = Field(None, description="shown in the report (default: file name)")
    version: NonEmpty | None = Field(None, description="the deployment's Mooncake version")


class EtcdTable(_Table):
    endpoints: tuple[HostPort, ...] = ()


class MasterEntry(_Table):
    admin: Url = Field(description="the master's admin/metrics URL (mooncake_master "
                                   "--metrics_port)")
    rpc: HostPort | None = None


class EngineEntry(_Table):
    segment: NonEmpty = Field(description="the segment name the engine publishes")
    control: HostPort = Field(description="host:port of the engine driver's control socket")
    aliases: tuple[NonEmpty, ...] = ()


class ToxiproxyTable(_Table):
    url: Url | None = None
    proxies: dict[str, HostPort] = Field(default_factory=dict)


class FaultsTable(_Table):
    allow: tuple[Annotated[str, AfterValidator(_permission)], ...] = ("observe",)


class ClusterManifestFile(_Table):
    cluster: ClusterTable = ClusterTable()
    etcd: EtcdTable = EtcdTable()
    masters: tuple[MasterEntry, ...] = ()
    engines: tuple[EngineEntry, ...] = ()
    toxiproxy: ToxiproxyTable = ToxiproxyTable()
    faults: FaultsTable = FaultsTable()

    @model_validator(mode="after")
    def _consistent(self) -> ClusterManifestFile:
        names = [n for e in self.engines for n in (e.segment, *e.aliases)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise problem(("engines",), f"segment name(s) listed twice: {', '.join(dupes)}")
        if "metadata_faults" in self.faults.allow and not self.toxiproxy.url:
            raise problem(("faults", "allow"), "metadata_faults needs toxiproxy.url (the "
                          "Toxiproxy that fronts the deployment; pass it as --mc-toxiproxy)")
        return self


@dataclass(frozen=True)
class Manifest:
    """What the cluster target works from: a validated manifest file."""

    path: Path
    name: str
    version: str | None
    etcd: tuple[str, ...]
    masters: tuple[MasterEntry, ...]
    engines: tuple[EngineEntry, ...]
    toxiproxy: str | None
    allow: frozenset[str]
    proxies: Mapping[str, str] = field(default_factory=dict)

    def permits(self, what: str) -> bool:
        return what in self.allow


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a cluster manifest (a path, or the name of a shipped one such as
    ``example``); ``ManifestError`` naming the file and the field."""
    try:
        path = find("clusters", str(Path(path).expanduser()))
    except NotShipped as exc:
        raise ManifestError(f"{path}: no such manifest file (--mc-target=cluster:FILE or a "
                            f"shipped name; {exc})") from None
    try:
        doc = load(ClusterManifestFile, path)
    except SchemaError as exc:
        raise ManifestError(str(exc)) from None
    return Manifest(path, doc.cluster.name or path.stem, doc.cluster.version, doc.etcd.endpoints,
                    doc.masters, doc.engines, doc.toxiproxy.url, frozenset(doc.faults.allow),
                    dict(doc.toxiproxy.proxies))
