"""The set of proxies by name, with Toxiproxy's create, populate, remove and reset rules
(``proxy_collection.go``, ``api.go``)."""

from __future__ import annotations

from typing import Any

from pytest_mooncake.toxiproxy import errors
from pytest_mooncake.toxiproxy.addresses import AddressPolicy
from pytest_mooncake.toxiproxy.errors import ApiError
from pytest_mooncake.toxiproxy.names import check_name
from pytest_mooncake.toxiproxy.proxy import Proxy


def _proxy_fields(body: Any, where: str = "") -> tuple[str, str, str, bool | None]:
    """(name, listen, upstream, enabled) of a proxy object; missing enabled is None."""
    if not isinstance(body, dict):
        raise errors.BAD_REQUEST_BODY.joined(f"expected a JSON object{where}")
    for key in ("name", "listen", "upstream"):
        if not isinstance(body.get(key, ""), str):
            raise errors.BAD_REQUEST_BODY.joined(f"field {key!r}{where} must be a string")
    enabled = body.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise errors.BAD_REQUEST_BODY.joined(f"field 'enabled'{where} must be true or false")
    name, upstream = body.get("name", ""), body.get("upstream", "")
    if not name:
        raise errors.MISSING_FIELD.joined(f"name{where}")
    if not upstream:
        raise errors.MISSING_FIELD.joined(f"upstream{where}")
    check_name(name, "proxy")
    return name, body.get("listen", ""), upstream, enabled


class ProxyCollection:
    """All proxies of one server."""

    def __init__(self, policy: AddressPolicy, seed: int):
        self.policy = policy
        self.seed = seed
        self.proxies: dict[str, Proxy] = {}

    def get(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise errors.PROXY_NOT_FOUND from None

    async def create(self, body: Any) -> Proxy:
        name, listen, upstream, enabled = _proxy_fields(body)
        if name in self.proxies:
            raise errors.PROXY_ALREADY_EXISTS
        proxy = Proxy(name, listen, upstream, self.policy, self.seed)
        if enabled is not False:
            await proxy.start()
        self.proxies[name] = proxy
        return proxy

    async def populate(self, body: Any) -> tuple[list[Proxy], ApiError | None]:
        """Create or replace each proxy; replace only when listen or upstream differ. Stops at
        the first error and returns the proxies done so far with it."""
        if not isinstance(body, list):
            return [], errors.BAD_REQUEST_BODY.joined("expected a JSON array of proxies")
        try:
            fields = [_proxy_fields(item, f" at proxy {i + 1}") for i, item in enumerate(body)]
        except ApiError as exc:
            return [], exc
        done: list[Proxy] = []
        for name, listen, upstream, enabled in fields:
            try:
                existing = self.proxies.get(name)
                if existing is not None and not existing.differs(listen, upstream):
                    done.append(existing)
                    continue
                proxy = Proxy(name, listen, upstream, self.policy, self.seed)
                if existing is not None:
                    await existing.stop()
                    del self.proxies[name]
                if enabled is not False:
                    await proxy.start()
            except ApiError as exc:
                return done, exc
            self.proxies[name] = proxy
            done.append(proxy)
        return done, None

    async def remove(self, name: str) -> None:
        proxy = self.get(name)
        await proxy.stop()
        del self.proxies[name]

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic (``POST /reset``)."""
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.reset_toxics()

    async def clear(self) -> None:
        for name in list(self.proxies):
            await self.remove(name)
