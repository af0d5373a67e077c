"""``host:port`` parsing and the loopback-only rule for listen and upstream addresses.

The project only ever talks to 127.0.0.1; the server refuses any other address unless it was
started with ``--allow-non-loopback``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pytest_mooncake.toxiproxy.errors import BAD_REQUEST_BODY, ApiError
from pytest_mooncake.toxiproxy.names import brief


def split_hostport(text: str, what: str) -> tuple[str, int]:
    """``"127.0.0.1:8474"`` or ``"[::1]:8474"`` -> (host, port); ApiError naming ``what``."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BAD_REQUEST_BODY.joined(f"{what} must be host:port with a port 0-65535, got {brief(text)}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AddressPolicy:
    """Which addresses proxies may listen on and connect to."""

    allow_non_loopback: bool = False

    def listen(self, text: str) -> tuple[str, int]:
        """The (host, port) to bind for a proxy's ``listen``; empty means 127.0.0.1:0."""
        host, port = split_hostport(text or "127.0.0.1:0", "listen")
        self._check(host, "listen", text)
        return ("127.0.0.1" if host == "localhost" else host), port

    def upstream(self, text: str) -> tuple[str, int]:
        host, port = split_hostport(text, "upstream")
        if port == 0:
            raise BAD_REQUEST_BODY.joined(f"upstream port must not be 0, got {brief(text)}")
        self._check(host, "upstream", text)
        return host, port

    def _check(self, host: str, what: str, text: str) -> None:
        if not self.allow_non_loopback and not is_loopback(host):
            raise ApiError(
                f"{what} address {brief(text)} is not a loopback address; this server only proxies "
                f"on 127.0.0.1 unless started with --allow-non-loopback", 400)
