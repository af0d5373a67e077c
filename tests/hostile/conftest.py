"""Servers as processes, started with the flags a test chooses (short receive timeouts, small
connection limits), so a test sees what a hostile or idle peer does to the real process."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_mooncake.runtime.processes import log_matches
from reference_engine.engine.control_client import ControlClient
from reference_engine.metadata.http_server import MetadataHttpServer

READY = r'"event": "ready"'


def ready_line(proc, pattern: str = '"event": "ready"') -> dict[str, Any]:
    text = proc.log_text().rsplit("--- start #", 1)[-1]
    return next(json.loads(line) for line in text.splitlines() if pattern in line)


@dataclass
class EngineProcess:
    name: str
    pid: int
    data: tuple[str, int]
    control: tuple[str, int]
    buffer: tuple[int, int]
    client: ControlClient


@pytest.fixture
def metadata_url():
    server = MetadataHttpServer().start()
    yield server.url
    server.stop()


@pytest.fixture
def start_engine(mc_processes, metadata_url):
    """``start_engine(*flags)``: a ``python -m reference_engine engine`` process."""
    clients = []

    def start(*flags: str, name: str = "hostile", buffer_size: int = 1 << 20) -> EngineProcess:
        proc = mc_processes.start(name, [
            sys.executable, "-m", "reference_engine", "engine", "--name", name,
            "--metadata", metadata_url, "--buffer-size", str(buffer_size), *flags],
            ready=log_matches(READY))
        ready = ready_line(proc)
        client = ControlClient(ready["control_port"], timeout=30)
        clients.append(client)
        return EngineProcess(name, proc.pid, ("127.0.0.1", ready["data_port"]),
                             ("127.0.0.1", ready["control_port"]), tuple(ready["buffers"][0]),
                             client)

    yield start
    for c in clients:
        c.close()


@dataclass
class HttpProcess:
    pid: int
    address: tuple[str, int]


@pytest.fixture
def start_metadata_server(mc_processes):
    """``start_metadata_server(*flags)``: a ``python -m reference_engine metadata-server``."""

    def start(*flags: str) -> HttpProcess:
        proc = mc_processes.start("metadata-server", [
            sys.executable, "-m", "reference_engine", "metadata-server",
            "--listen", "127.0.0.1:0", *flags], ready=log_matches(READY))
        return HttpProcess(proc.pid, ("127.0.0.1", ready_line(proc)["port"]))

    return start


@pytest.fixture
def start_toxiproxy(mc_processes, mc_seed):
    """``start_toxiproxy(*flags)``: a ``python -m pytest_mooncake.toxiproxy`` API server."""

    def start(*flags: str) -> HttpProcess:
        proc = mc_processes.start("toxiproxy", [
            sys.executable, "-m", "pytest_mooncake.toxiproxy", "--listen", "127.0.0.1:0",
            "--seed", str(mc_seed), *flags], ready=log_matches(r"mc-toxiproxy ready:"))
        port = int(re.search(r"url=http://127\.0\.0\.1:(\d+)", proc.log_text()).group(1))
        return HttpProcess(proc.pid, ("127.0.0.1", port))

    return start


@pytest.fixture
def start_master(mc_etcd, tmp_path):
    """``start_master(*flags)``: one reference master (the leader) and one store client."""
    from pytest_mooncake.targets.reference.masters import ReferenceMasterCluster

    made = []

    def start(*flags: str):
        cluster = ReferenceMasterCluster(mc_etcd.endpoints, tmp_path / f"cluster-{len(made)}",
                                         "rfc", 1, 1, master_args=list(flags))
        made.append(cluster)
        return cluster

    yield start
    for cluster in made:
        cluster.close()
