"""The run's container engine: its networks are internal /24s of 198.18.0.0/15, and what a run
made is gone after it ends, also when pytest is SIGKILLed (the keeper removes it)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap

from pytest_mooncake.container_engine.labels import SESSION_LABEL, container_names, list_containers
from pytest_mooncake.container_engine.run_networks import BRIDGE_PREFIX, create_network, subnet_of
from pytest_mooncake.container_engine.session_engine import ContainerEngine
from pytest_mooncake.runtime.deadlines import wait_until

RUN_RANGE = ipaddress.ip_network("198.18.0.0/15")
PODMAN_DEFAULT = ipaddress.ip_network("10.88.0.0/16")


def _left(engine: ContainerEngine, session: str) -> dict[str, list[str]]:
    flt = {"label": [f"{SESSION_LABEL}={session}"]}
    return {"containers": container_names(list_containers(engine.client, flt)),
            "networks": [n.name for n in engine.client.networks.list(filters=flt)]}


def _podman_cli(engine: ContainerEngine, *args: str) -> list[dict]:
    out = subprocess.run(["podman", *args, "--format", "json"], env=engine.home.env(),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out or "[]")


def test_run_network_is_an_internal_slash20_of_the_benchmark_range(container_engine, tiny_image):
    net = create_network(container_engine.client, f"mc-{container_engine.session}-t1",
                         container_engine.labels)
    try:
        subnet = subnet_of(net)
        assert subnet.prefixlen == 20 and subnet.subnet_of(RUN_RANGE)
        assert not subnet.overlaps(PODMAN_DEFAULT)
        assert net.attrs["Internal"] is True
        box = container_engine.client.containers.run(
            tiny_image, ["sleep", "60"], detach=True, network=net.name,
            labels=container_engine.labels)
        box.reload()
        address = box.attrs["NetworkSettings"]["Networks"][net.name]["IPAddress"]
        assert ipaddress.ip_address(address) in subnet
        bridges = subprocess.run(["ip", "-br", "-4", "addr", "show"], capture_output=True,
                                 text=True, check=True).stdout
        line = next(ln for ln in bridges.splitlines() if str(subnet.network_address + 1) in ln)
        assert line.split()[0].startswith(BRIDGE_PREFIX)  # so the netns lab counts it as held
        box.remove(force=True)
    finally:
        net.remove()


SCRIPT = textwrap.dedent('''
    import os, signal, sys
    from pytest_mooncake.container_engine.run_networks import create_network
    from pytest_mooncake.container_engine.session_engine import ContainerEngine
    engine = ContainerEngine().start()
    net = create_network(engine.client, "mc-" + engine.session, engine.labels)
    engine.client.containers.run(sys.argv[1], ["sleep", "300"], detach=True,
                                 network=net.name, labels=engine.labels)
    print(engine.session, engine.url, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
''')


def test_sigkilled_run_leaves_no_container_network_or_socket(container_engine, tiny_image):
    run = subprocess.run([sys.executable, "-c", SCRIPT, tiny_image], capture_output=True,
                         text=True, timeout=180, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert run.returncode == -signal.SIGKILL, run.stderr
    session, url = run.stdout.split()
    wait_until(lambda: _left(container_engine, session) == {"containers": [], "networks": []},
               60, f"the keeper of the killed run to remove session {session}")
    flt = f"label={SESSION_LABEL}={session}"
    assert _podman_cli(container_engine, "ps", "-a", "--filter", flt) == []
    assert _podman_cli(container_engine, "network", "ls", "--filter", flt) == []
    socket_path = url.removeprefix("unix://")
    log_path = container_engine.log_path.with_name(f"{session}.log")
    wait_until(lambda: not os.path.exists(socket_path) and not log_path.exists(), 30,
               f"the killed run's Podman socket {socket_path} and log {log_path} to be removed")


def test_closing_the_engine_removes_what_the_run_made(tiny_image):
    engine = ContainerEngine().start()
    net = create_network(engine.client, f"mc-{engine.session}", engine.labels)
    engine.client.containers.run(tiny_image, ["sleep", "300"], detach=True, network=net.name,
                                 labels=engine.labels)
    session = engine.session
    assert engine.close() == []
    checker = ContainerEngine().start()
    try:
        assert _left(checker, session) == {"containers": [], "networks": []}
    finally:
        checker.close()


def test_listing_a_sessions_containers_inspects_none_of_them(container_engine, tiny_image):
    """Another run may remove a container between the listing and its inspection; Podman then
    answers 500 (not the 404 docker-py forgives), which failed a keeper's wait in CI. The
    listing must therefore not inspect: a removed container can no longer break it."""
    box = container_engine.client.containers.run(tiny_image, ["sleep", "60"], detach=True,
                                                 network_mode="none",
                                                 labels=container_engine.labels)
    client = container_engine.client
    inspect = client.api.inspect_container

    def gone(*args, **kwargs):
        raise AssertionError("the listing inspected a container")
    client.api.inspect_container = gone
    try:
        found = list_containers(client, {"label": [f"{SESSION_LABEL}={container_engine.session}"]})
    finally:
        client.api.inspect_container = inspect
        box.remove(force=True)
    assert box.name in container_names(found)
