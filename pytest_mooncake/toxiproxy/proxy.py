"""A proxy: a loopback listener, its upstream, its live connections and its toxics.

Mirrors Toxiproxy's ``proxy.go`` and ``toxic_collection.go``: a disabled proxy has no
listener and no connections; toxics are added to, updated on and removed from live
connections; a toxic's name is unique within the proxy across both streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pytest_mooncake.toxiproxy import errors
from pytest_mooncake.toxiproxy.addresses import AddressPolicy
from pytest_mooncake.toxiproxy.errors import ApiError
from pytest_mooncake.toxiproxy.link import DIRECTIONS, Connection
from pytest_mooncake.toxiproxy.names import brief
from pytest_mooncake.toxiproxy.side import Side
from pytest_mooncake.toxiproxy.toxic_spec import ToxicSpec

log = logging.getLogger("mc-toxiproxy")
UPSTREAM_CONNECT_TIMEOUT = 10.0


class Proxy:
    """One named proxy, enabled (listening) or disabled."""

    def __init__(self, name: str, listen: str, upstream: str, policy: AddressPolicy,
                 seed: int):
        self.name = name
        self.policy = policy
        self.seed = seed
        policy.listen(listen)
        policy.upstream(upstream)
        self.listen = listen or "127.0.0.1:0"
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, ToxicSpec] = {}
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._serial = 0
        self.received = dict.fromkeys(DIRECTIONS, 0)
        """Bytes read from clients (upstream) and from the upstream server (downstream), over
        the proxy's life: Toxiproxy's ``toxiproxy_proxy_received_bytes_total``."""

    def _count(self, direction: str, n: int) -> None:
        self.received[direction] += n

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": self.toxic_list()}

    def toxic_list(self) -> list[dict[str, Any]]:
        """Upstream toxics first, then downstream, each in the order added (Toxiproxy's)."""
        return [spec.to_json() for stream in DIRECTIONS
                for spec in self.toxics.values() if spec.stream == stream]

    # ------------------------------------------------------------ listener

    async def start(self) -> None:
        if self.enabled:
            return
        host, port = self.policy.listen(self.listen)
        try:
            self._server = await asyncio.get_running_loop().create_server(
                self._new_client, host, port)
        except OSError as exc:
            raise ApiError(f"listen tcp {self.listen}: {exc.strerror or exc}", 500) from None
        bound = self._server.sockets[0].getsockname()
        self.listen = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        self.enabled = True
        log.info("proxy %s listening on %s, upstream %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        """Close the listener (new connections are refused) and drop every connection."""
        if not self.enabled:
            return
        self.enabled = False
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self.connections):
            conn.abort(reset=False)
        for task in list(self._handlers):
            task.cancel()
        log.info("proxy %s stopped", self.name)

    def differs(self, listen: str, upstream: str) -> bool:
        """Toxiproxy's ``Differs``: another listen address or upstream (port 0 always differs
        from a bound port)."""
        host, port = self.policy.listen(listen)
        return f"{host}:{port}" != self.listen or upstream != self.upstream

    async def update(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise errors.BAD_REQUEST_BODY.joined("expected a JSON object")
        listen = body.get("listen", self.listen)
        upstream = body.get("upstream", self.upstream)
        enabled = body.get("enabled", self.enabled)
        if not isinstance(listen, str) or not isinstance(upstream, str):
            raise errors.BAD_REQUEST_BODY.joined("listen and upstream must be strings")
        if not isinstance(enabled, bool):
            raise errors.BAD_REQUEST_BODY.joined(f"enabled must be true or false, got {brief(enabled)}")
        self.policy.upstream(upstream)
        if self.differs(listen, upstream):
            await self.stop()
            self.listen, self.upstream = listen or "127.0.0.1:0", upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled:
            await self.stop()

    def _new_client(self) -> Side:
        side = Side()
        task = asyncio.get_running_loop().create_task(self._serve(side))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        return side

    async def _serve(self, client: Side) -> None:
        try:
            upstream = await self._connect_upstream(client)
        except BaseException:  # cannot connect, or the proxy stopped meanwhile
            client.close(reset=False)
            raise
        if upstream is None or not self.enabled or client.closed:
            client.close(reset=False)
            if upstream is not None:
                upstream.close(reset=False)
            return
        self._serial += 1
        conn = Connection(client, upstream, self.toxics.values(),
                          f"{self.seed}:{self.name}:{self._serial}", self.connections.discard,
                          self._count)
        self.connections.add(conn)
        with contextlib.suppress(asyncio.CancelledError):
            await conn.run()

    async def _connect_upstream(self, client: Side) -> Side | None:
        await client.connected
        host, port = self.policy.upstream(self.upstream)
        try:
            _, upstream = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(Side, host, port),
                UPSTREAM_CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            log.warning("proxy %s: cannot connect to upstream %s: %s", self.name,
                        self.upstream, exc)
            return None
        return upstream

    # ------------------------------------------------------------ toxics

    def add_toxic(self, body: Any) -> ToxicSpec:
        spec = ToxicSpec.create(body, self.toxics)
        self.toxics[spec.name] = spec
        for conn in list(self.connections):
            conn.links[spec.stream].add(spec)
        log.info("proxy %s: added toxic %s", self.name, spec.to_json())
        return spec

    def get_toxic(self, name: str) -> ToxicSpec:
        try:
            return self.toxics[name]
        except KeyError:
            raise errors.TOXIC_NOT_FOUND from None

    def update_toxic(self, name: str, body: Any) -> ToxicSpec:
        spec = self.get_toxic(name).updated(body)
        self.toxics[name] = spec
        for conn in list(self.connections):
            conn.links[spec.stream].update(spec)
        log.info("proxy %s: updated toxic %s", self.name, spec.to_json())
        return spec

    def remove_toxic(self, name: str) -> None:
        spec = self.get_toxic(name)
        del self.toxics[name]
        for conn in list(self.connections):
            conn.links[spec.stream].remove(name)
        log.info("proxy %s: removed toxic %s", self.name, name)

    def reset_toxics(self) -> None:
        for name in list(self.toxics):
            self.remove_toxic(name)
