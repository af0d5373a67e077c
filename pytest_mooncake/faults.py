"""``mc_toxiproxy`` and ``mc_faults``: network faults through the Toxiproxy API.

``mc_toxiproxy`` (session, one per xdist worker) is the Toxiproxy server in use: with
``--mc-toxiproxy=URL`` a real Toxiproxy (checked with ``GET /version``, never stopped), else
the plugin's embedded server (``python -m pytest_mooncake.toxiproxy``) started on a free
loopback port with the session seed, and stopped (SIGTERM, then SIGKILL) and reaped at session
end. ``mc_faults`` (per test) makes proxies through ``toxiproxy-python`` and deletes every
proxy the test made when it ends, passed or failed (on our own server also those made through
``client()`` or ``api()``, then ``POST /reset``). Toxics added, removed, and disable/enable on a
proxy from ``proxy()`` appear as allure steps; the server's log is shown for failing tests.

Example::

    def test_reads_survive_latency(mc_faults, my_server):
        proxy, addr = mc_faults.proxy("meta", my_server.address)
        proxy.add_toxic(type="latency", attributes={"latency": 100})
        client = connect(addr)   # traffic now goes through the proxy
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.options import McConfig
from pytest_mooncake.processes import ManagedProcess, ProcessStartError
from pytest_mooncake.services import serve

READY_TIMEOUT = 20.0
EXTERNAL_CHECK_TIMEOUT = 5.0
_READY_LINE = re.compile(r"mc-toxiproxy ready: url=(http://127\.0\.0\.1:\d+)")


class ToxiproxyUnavailable(RuntimeError):
    """The Toxiproxy server could not be started or reached; the message says why."""


def api_request(url: str, method: str, path: str, body: Any = None,
                timeout: float = 5.0) -> tuple[int, Any]:
    """One call to a Toxiproxy API: (status, decoded JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback)
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode(errors="replace")


def toxiproxy_version(url: str, timeout: float = 0.5) -> str | None:
    """The version a Toxiproxy server at ``url`` reports, or None if it does not answer."""
    try:
        status, body = api_request(url, "GET", "/version", timeout=timeout)
    except (OSError, ValueError):
        return None
    if status != 200 or not isinstance(body, dict):
        return None
    return str(body.get("version", ""))


class EmbeddedToxiproxy:
    """The plugin's own server in a child process, on a port it picks itself (no race)."""

    owned = True

    def __init__(self, log_path: Path, seed: int, ready_timeout: float = READY_TIMEOUT):
        self.url = ""
        self.seed = seed
        argv = [sys.executable, "-m", "pytest_mooncake.toxiproxy",
                "--listen", "127.0.0.1:0", "--seed", str(seed)]
        root = str(Path(__file__).resolve().parent.parent)  # importable even when not installed
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        self.process = ManagedProcess("mc-toxiproxy", argv, log_path,
                                      env=dict(os.environ, PYTHONPATH=path),
                                      ready=self._ready, ready_timeout=ready_timeout)

    def _ready(self, proc: ManagedProcess) -> bool:
        match = _READY_LINE.search(proc.log_text())
        if match is None:
            return False
        self.url = match.group(1)
        return toxiproxy_version(self.url) is not None

    _ready.__doc__ = "prints its ready line and answers GET /version"

    def start(self) -> EmbeddedToxiproxy:
        try:
            self.process.start()
        except ProcessStartError as exc:
            raise ToxiproxyUnavailable(f"embedded Toxiproxy server did not start: {exc}") \
                from None
        return self

    def close(self) -> None:
        self.process.terminate()

    def alive(self) -> bool:
        return self.process.alive()

    def log_text(self) -> str:
        return self.process.log_text()


class ExternalToxiproxy:
    """A Toxiproxy given with ``--mc-toxiproxy=URL``: used, never started or stopped."""

    owned = False

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.process = None

    def check(self, timeout: float = EXTERNAL_CHECK_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while toxiproxy_version(self.url) is None:
            if time.monotonic() >= deadline:
                raise ToxiproxyUnavailable(
                    f"--mc-toxiproxy={self.url}: no answer to GET /version within "
                    f"{timeout:.0f}s; check that Toxiproxy runs there, or omit --mc-toxiproxy "
                    f"to use the embedded server")
            time.sleep(0.1)

    def close(self) -> None:
        pass

    def alive(self) -> bool:
        return toxiproxy_version(self.url) is not None

    def log_text(self) -> str:
        return f"(external Toxiproxy at {self.url}: no log)"


@pytest.fixture(scope="session")
def mc_toxiproxy(pytestconfig: pytest.Config, mc_config: McConfig,
                 tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[EmbeddedToxiproxy | ExternalToxiproxy]:
    """The Toxiproxy server in use: ``.url``, ``.owned``; embedded unless --mc-toxiproxy."""
    if mc_config.toxiproxy:
        external = ExternalToxiproxy(mc_config.toxiproxy)
        try:
            external.check()
        except ToxiproxyUnavailable as exc:
            pytest.exit(str(exc), returncode=4)
        yield external
        return
    server = EmbeddedToxiproxy(tmp_path_factory.mktemp("toxiproxy") / "toxiproxy.log",
                               mc_config.seed)
    yield from serve(pytestconfig, "mc_toxiproxy", "toxiproxy log", server,
                     ToxiproxyUnavailable)


def _step(title: str) -> contextlib.AbstractContextManager[Any]:
    """An allure step when allure is installed (it records only when a report is made)."""
    try:
        import allure  # noqa: PLC0415
    except ImportError:
        return contextlib.nullcontext()
    return allure.step(title)


@functools.cache
def _stepped_proxy_class() -> type:
    """A ``toxiproxy.Proxy`` whose fault injections show up as allure steps."""
    from toxiproxy import Proxy  # noqa: PLC0415 (import-light plugin)

    class SteppedProxy(Proxy):
        def add_toxic(self, **kwargs: Any) -> None:
            with _step(f"toxiproxy {self.name}: add toxic {kwargs}"):
                return super().add_toxic(**kwargs)

        def destroy_toxic(self, toxic_name: str) -> bool:
            with _step(f"toxiproxy {self.name}: remove toxic {toxic_name}"):
                return super().destroy_toxic(toxic_name)

        def disable(self) -> Any:
            with _step(f"toxiproxy {self.name}: disable (connections refused)"):
                return super().disable()

        def enable(self) -> Any:
            with _step(f"toxiproxy {self.name}: enable"):
                return super().enable()

    return SteppedProxy


class Faults:
    """Network faults for one test: proxies on a Toxiproxy server, removed when the test ends."""

    def __init__(self, server: EmbeddedToxiproxy | ExternalToxiproxy, suffix: str = ""):
        self.server = server
        self.url = server.url
        self._suffix = suffix
        self._made: list[str] = []
        self._before: set[str] | None = None
        if server.owned:
            status, body = api_request(self.url, "GET", "/proxies")
            self._before = set(body) if status == 200 and isinstance(body, dict) else set()

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A raw API call: (status, decoded body). Proxies created through it are removed at
        the end of the test like those from ``proxy()``."""
        status, answer = api_request(self.url, method, path, body)
        if (method, path, status) == ("POST", "/proxies", 201) and isinstance(answer, dict):
            self._made.append(answer.get("name", ""))
        elif (method, path) == ("POST", "/populate") and isinstance(answer, dict):
            self._made += [p.get("name", "") for p in answer.get("proxies") or []]
        return status, answer

    def client(self) -> Any:
        """A ``toxiproxy.Toxiproxy`` (toxiproxy-python) pointed at this server."""
        from toxiproxy import Toxiproxy  # noqa: PLC0415 (import-light plugin)

        parsed = urllib.parse.urlsplit(self.url)
        client = Toxiproxy()
        client.update_api_consumer(parsed.hostname, parsed.port)
        return client

    def proxy(self, name: str, upstream: str, enabled: bool = True) -> tuple[Any, str]:
        """A proxy to ``upstream`` on an ephemeral loopback port: (toxiproxy-python Proxy,
        "127.0.0.1:port"). With a shared external server under xdist the name gets the worker
        id appended, so workers do not collide; use the returned object's ``name``."""
        full = name + self._suffix
        self._made.append(full)
        with _step(f"toxiproxy: proxy {full} -> {upstream}"):
            made = self.client().create(upstream=upstream, name=full, listen="127.0.0.1:0",
                                        enabled=enabled)
        proxy = _stepped_proxy_class()(name=made.name, upstream=made.upstream,
                                       enabled=made.enabled, listen=made.listen)
        return proxy, proxy.listen

    def cleanup(self) -> list[str]:
        """Delete the proxies this test made (all new ones on our own server, also those made
        through ``client()``), then reset our own server. Returns the names deleted."""
        names = list(self._made)
        if self._before is not None:
            status, body = api_request(self.url, "GET", "/proxies")
            if status == 200 and isinstance(body, dict):
                names = [n for n in body if n not in self._before]
        deleted = []
        for name in names:
            status, _ = api_request(self.url, "DELETE", "/proxies/" + urllib.parse.quote(name))
            if status == 204:
                deleted.append(name)
        if self.server.owned:
            api_request(self.url, "POST", "/reset")
        return deleted


@pytest.fixture
def mc_faults(mc_toxiproxy: EmbeddedToxiproxy | ExternalToxiproxy) -> Iterator[Faults]:
    """Per-test network faults: ``.url``, ``.client()``, ``.proxy(name, upstream)``."""
    if mc_toxiproxy.owned and not mc_toxiproxy.alive():
        pytest.fail(f"the embedded Toxiproxy server exited ({mc_toxiproxy.process!r}); its log:\n"
                    f"{mc_toxiproxy.process.log_tail()}", pytrace=False)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    suffix = f"-{worker}" if worker and not mc_toxiproxy.owned else ""
    faults = Faults(mc_toxiproxy, suffix)
    try:
        yield faults
    finally:
        faults.cleanup()
