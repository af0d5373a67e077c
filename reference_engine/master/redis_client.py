"""Connecting to Redis for master HA: one redis-py client, every call with a deadline and no
retries inside the client (the election's lease arithmetic needs a failed call to fail now)."""

from __future__ import annotations

from typing import Any


def parse_address(spec: str) -> str:
    """``"host:port"`` or ``"redis://host:port"`` -> ``"host:port"``; a ValueError naming what
    was wrong otherwise."""
    address = spec.strip().removeprefix("redis://").rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"redis address {spec!r}: expected host:port or redis://host:port")
    return address


def connect(address: str, timeout: float) -> Any:
    """A redis-py client on ``host:port`` whose calls give up after ``timeout`` seconds; it
    dials anew on the call after a broken connection (redis-py's pool does)."""
    import redis  # noqa: PLC0415 (only masters on Redis HA need it)
    from redis.backoff import NoBackoff  # noqa: PLC0415
    from redis.retry import Retry  # noqa: PLC0415

    host, _, port = parse_address(address).rpartition(":")
    return redis.Redis(host=host.strip("[]"), port=int(port), socket_timeout=timeout,
                       socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))


def is_redis_failure(exc: BaseException) -> bool:
    """True for "Redis did not answer" (down, partitioned, timed out), not a programming error."""
    import redis  # noqa: PLC0415

    return isinstance(exc, (redis.ConnectionError, redis.TimeoutError, TimeoutError,
                            ConnectionError))
