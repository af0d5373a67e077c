"""The node tables of a cluster file: the machines (``[[nodes]]``) and the processes on them
(``[[components]]``), as pydantic models. ``cluster_manifest.ClusterFile`` holds them beside
the tables the cluster target observes; ``pytest_mooncake.nodes`` drives what they describe.

A component is started by a command line (``start``, run by POSIX ``sh`` on its node with
``env``) or a systemd ``unit``, or by neither: then it is an operator's process the run only
finds (pid file or command-line ``match``), reads, signals and kills, but never starts.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KINDS = ("etcd", "master", "engine", "client", "other")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_LINK = r"^[A-Za-z0-9_.-]{1,15}$"


def _absolute_posix(value: str | None, what: str) -> str | None:
    if value is not None and not PurePosixPath(value).is_absolute():
        raise ValueError(f"{what} must be an absolute path on the node, got {value!r}")
    return value


class NodeSpec(BaseModel):
    """One machine reachable over SSH."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME, description="how components and faults name the node")
    host: str = Field(min_length=1, description="the SSH host")
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("root", min_length=1)
    key: Path | None = None
    known_hosts: Path | None = None
    sudo: bool = False
    address: str | None = None
    run_dir: str = "/tmp/mooncake-nodes"
    lab_link: str | None = Field(None, pattern=_LINK)
    connect_timeout: float = Field(10.0, gt=0, le=600)
    command_timeout: float = Field(30.0, gt=0, le=3600)

    @field_validator("key", "known_hosts")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("address")
    @classmethod
    def _ip(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)  # raises ValueError naming the text
        return value

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, value: str) -> str:
        return _absolute_posix(value, "run_dir") or value

    @property
    def peer_address(self) -> str | None:
        """The IP other nodes reach this node at: ``address``, else ``host`` when it is an IP."""
        if self.address:
            return self.address
        try:
            return str(ipaddress.ip_address(self.host))
        except ValueError:
            return None

    def describe(self) -> str:
        return f"{self.name} ({self.user}@{self.host}:{self.port})"


class ComponentSpec(BaseModel):
    """One process on one node, and how to start (if ours to start), find, stop and read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    kind: Literal["etcd", "master", "engine", "client", "other"]
    node: str
    start: str | None = None
    unit: str | None = Field(None, pattern=r"^[A-Za-z0-9@_.:\\-]+$")
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    pid_file: str | None = None
    match: str | None = None
    log: str | None = None
    ready_log: str | None = None
    ready_tcp: str | None = None
    start_timeout: float = Field(30.0, gt=0, le=3600)
    stop_timeout: float = Field(10.0, gt=0, le=3600)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)]
        if bad:
            raise ValueError(f"not an environment variable name: {', '.join(bad)}")
        return value

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {value!r}") from None
        return value

    @field_validator("cwd", "pid_file", "log")
    @classmethod
    def _paths(cls, value: str | None, info: Any) -> str | None:
        return _absolute_posix(value, info.field_name)

    @field_validator("ready_tcp")
    @classmethod
    def _hostport(cls, value: str | None) -> str | None:
        if value is not None:
            host, _, port = value.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected HOST:PORT, got {value!r}")
        return value

    @model_validator(mode="after")
    def _how_to_start(self) -> ComponentSpec:
        if self.start is not None and self.unit is not None:
            raise ValueError("give one of `start` (a command line) or `unit` (a systemd unit), "
                             "not both")
        if self.unit is not None and (self.cwd or self.env):
            raise ValueError("cwd and env belong in the systemd unit, not beside `unit`")
        if self.start is None and self.unit is None and not (self.pid_file or self.match):
            raise ValueError("a component without `start` or `unit` (an operator's process the "
                             "run never starts) needs `pid_file` or `match` to be found")
        return self

    @property
    def startable(self) -> bool:
        """Whether the run can start it (a command line or a unit); else it is only found."""
        return self.start is not None or self.unit is not None

    def reads_env(self, name: str) -> bool:
        """Whether its command line expands ``$name`` (so a start can set it: routing)."""
        return self.start is not None and re.search(
            r"\$\{?" + re.escape(name) + r"\b", self.start) is not None

    def pid_path(self, node: NodeSpec) -> str | None:
        """Where the pid lives: the given pid file, or ours for a `start` component."""
        if self.pid_file:
            return self.pid_file
        return f"{node.run_dir}/{self.name}.pid" if self.start is not None else None

    def log_path(self, node: NodeSpec) -> str | None:
        if self.log:
            return self.log
        return f"{node.run_dir}/{self.name}.log" if self.start is not None else None
