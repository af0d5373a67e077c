"""The server: the HTTP API plus its proxies, in one asyncio loop."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path

from pytest_mooncake.toxiproxy import VERSION
from pytest_mooncake.toxiproxy.addresses import AddressPolicy
from pytest_mooncake.toxiproxy.api import Api
from pytest_mooncake.toxiproxy.collection import ProxyCollection
from pytest_mooncake.toxiproxy.http import DEFAULT_TIMEOUTS, Timeouts, start_http_server

log = logging.getLogger("mc-toxiproxy")


class ToxiproxyServer:
    """A Toxiproxy-compatible server: ``start()``, then ``url``; ``stop()`` closes every proxy."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474, seed: int = 0,
                 allow_non_loopback: bool = False, timeouts: Timeouts = DEFAULT_TIMEOUTS):
        self.policy = AddressPolicy(allow_non_loopback)
        self.host, self.port = self.policy.listen(f"{host}:{port}")
        self.seed = seed
        self.collection = ProxyCollection(self.policy, seed)
        self.api = Api(self.collection, VERSION)
        self.timeouts = timeouts
        self._http: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> str:
        self._http = await start_http_server(self.api.handle, self.host, self.port,
                                             self.timeouts)
        self.port = self._http.sockets[0].getsockname()[1]
        return self.url

    async def populate_file(self, path: Path) -> None:
        """Create the proxies of a Toxiproxy ``-config`` JSON file (an array of proxies)."""
        done, err = await self.collection.populate(json.loads(Path(path).read_text()))
        if err is not None:
            raise ValueError(f"{path}: {err.message}")
        log.info("populated %d proxies from %s", len(done), path)

    async def stop(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        await self.collection.clear()

    async def serve_until_signal(self) -> int:
        """Run until SIGTERM or SIGINT, then close everything; the process exit code."""
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        log.info("shutting down")
        await self.stop()
        return 0
