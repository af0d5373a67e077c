"""The manifest of an existing deployment (``--mc-target=cluster:FILE``):
``fixtures/clusters/example.toml`` documents the format."""

from __future__ import annotations

import re
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PERMISSIONS = ("observe", "transfers", "metadata_writes", "metadata_faults")
TABLES = ("cluster", "etcd", "masters", "engines", "toxiproxy", "faults")
_HOSTPORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


class ManifestError(ValueError):
    """The manifest is unusable; the message names the file and the field."""


# ------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class EngineEntry:
    segment: str
    control: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class MasterEntry:
    admin: str
    rpc: str | None = None


@dataclass(frozen=True)
class Manifest:
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


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover (Python 3.10)
        try:
            import tomli as tomllib
        except ImportError:
            raise ManifestError(f"{path}: reading TOML on Python 3.10 needs `pip install tomli`") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such manifest file (--mc-target=cluster:FILE)") from None
    except IsADirectoryError:
        raise ManifestError(f"{path}: is a directory, not a manifest file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None


class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, why: str) -> ManifestError:
        return ManifestError(f"{self.path}: {where}: {why}")

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"expected a non-empty string, got {value!r}")
        return value.strip()

    def hostport(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        m = _HOSTPORT.match(text)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise self.fail(where, f"expected host:port, got {text!r}")
        return text

    def url(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        parsed = urllib.parse.urlparse(text)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise self.fail(where, f"expected an http:// or https:// URL, got {text!r}")
        return text.rstrip("/")

    def table(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a table, got {type(value).__name__}")
        return value

    def keys(self, table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
        unknown = sorted(set(table) - set(allowed))
        if unknown:
            raise self.fail(where, f"unknown key(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(allowed)})")

    def array(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected an array, got {type(value).__name__}")
        return value


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a cluster manifest; raises ``ManifestError`` naming file and field."""
    path = Path(path).expanduser()
    doc = _load_toml(path)
    c = _Checker(path)
    c.keys(doc, TABLES, "top level")
    meta = c.table(doc.get("cluster", {}), "[cluster]")
    c.keys(meta, ("name", "version"), "[cluster]")
    name = c.string(meta["name"], "[cluster].name") if "name" in meta else path.stem
    version = c.string(meta["version"], "[cluster].version") if "version" in meta else None

    etcd_t = c.table(doc.get("etcd", {}), "[etcd]")
    c.keys(etcd_t, ("endpoints",), "[etcd]")
    etcd = tuple(c.hostport(e, f"[etcd].endpoints[{i}]")
                 for i, e in enumerate(c.array(etcd_t.get("endpoints", []), "[etcd].endpoints")))

    masters = []
    for i, m in enumerate(c.array(doc.get("masters", []), "[[masters]]")):
        where = f"[[masters]][{i}]"
        m = c.table(m, where)
        c.keys(m, ("admin", "rpc"), where)
        if "admin" not in m:
            raise c.fail(where, "missing key admin (the master's admin/metrics URL)")
        masters.append(MasterEntry(c.url(m["admin"], f"{where}.admin"),
                                   c.hostport(m["rpc"], f"{where}.rpc") if "rpc" in m else None))

    engines = []
    for i, e in enumerate(c.array(doc.get("engines", []), "[[engines]]")):
        where = f"[[engines]][{i}]"
        e = c.table(e, where)
        c.keys(e, ("segment", "control", "aliases"), where)
        for key in ("segment", "control"):
            if key not in e:
                raise c.fail(where, f"missing key {key}")
        aliases = tuple(c.string(a, f"{where}.aliases[{j}]")
                        for j, a in enumerate(c.array(e.get("aliases", []), f"{where}.aliases")))
        engines.append(EngineEntry(c.string(e["segment"], f"{where}.segment"),
                                   c.hostport(e["control"], f"{where}.control"), aliases))
    names = [n for e in engines for n in (e.segment, *e.aliases)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise c.fail("[[engines]]", f"segment name(s) listed twice: {', '.join(dupes)}")

    toxi_t = c.table(doc.get("toxiproxy", {}), "[toxiproxy]")
    c.keys(toxi_t, ("url", "proxies"), "[toxiproxy]")
    toxiproxy = c.url(toxi_t["url"], "[toxiproxy].url") if "url" in toxi_t else None
    proxies_t = c.table(toxi_t.get("proxies", {}), "[toxiproxy.proxies]")
    proxies = {str(k): c.hostport(v, f"[toxiproxy.proxies].{k}") for k, v in proxies_t.items()}

    faults = c.table(doc.get("faults", {}), "[faults]")
    c.keys(faults, ("allow",), "[faults]")
    allow = []
    for i, a in enumerate(c.array(faults.get("allow", ["observe"]), "[faults].allow")):
        a = c.string(a, f"[faults].allow[{i}]")
        if a not in PERMISSIONS:
            raise c.fail(f"[faults].allow[{i}]",
                         f"unknown permission {a!r} (known: {', '.join(PERMISSIONS)})")
        allow.append(a)
    if "metadata_faults" in allow and not toxiproxy:
        raise c.fail("[faults].allow", "metadata_faults needs [toxiproxy].url (the Toxiproxy "
                                       "that fronts the deployment; pass it as --mc-toxiproxy)")
    return Manifest(path, name, version, etcd, tuple(masters), tuple(engines), toxiproxy,
                    frozenset(allow), proxies)
