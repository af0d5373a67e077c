"""Leader election on etcd, as Mooncake's etcd coordinator does it.

The leader key ``mooncake-store/<cluster>/master_view`` holds the leader's RPC address and is
bound to a lease (``ttl`` seconds). Acquiring is a transaction "create if the key's
CreateRevision is 0"; the view version is the key's CreateRevision. A leader may serve only
while its lease is certainly alive: ``valid_until`` is the time the last successful keepalive
was *sent* plus the TTL etcd granted, minus a margin, so the leader stops before etcd could have
expired it. The first term starts when the grant request was sent, not when the (possibly slow)
acquisition returned: etcd counts the TTL from the grant.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from reference_engine.master.etcd_client import is_etcd_failure
from reference_engine.master.oplog import master_view_key


@dataclass(frozen=True)
class LeaderView:
    address: str
    view_version: int
    lease_id: int


class LeasedSession:
    """Held leadership under a lease of ``ttl`` seconds, whatever keeps it (strategy: a
    subclass renews and releases on its store). Valid only until the last renewal that was
    *sent* and answered plus the TTL the store granted, minus ``margin``."""

    def __init__(self, view: LeaderView, ttl: float, margin: float, granted_at: float | None):
        """``granted_at``: ``time.monotonic()`` just before the acquisition was sent (the
        store's TTL can have started no earlier); default now."""
        self.view = view
        self.ttl = ttl
        self.margin = margin
        start = time.monotonic() if granted_at is None else granted_at
        self._valid_until = start + ttl - margin
        self._lock = threading.Lock()
        self.released = False

    @property
    def view_version(self) -> int:
        return self.view.view_version

    def valid(self) -> bool:
        return not self.released and time.monotonic() < self._valid_until

    def keepalive(self) -> bool:
        """Renew the lease once; False when the lease is gone or the store did not answer."""
        sent = time.monotonic()
        granted = self._renew()
        if granted is None:
            return False
        if granted <= 0:
            with self._lock:
                self._valid_until = 0.0
            return False
        with self._lock:
            self._valid_until = max(self._valid_until, sent + granted - self.margin)
        return True

    def _renew(self) -> float | None:
        """Renew on the store: the TTL granted (seconds), 0 when the lease is no longer ours,
        None when the store did not answer."""
        raise NotImplementedError


class LeaderSession(LeasedSession):
    """Held leadership on etcd: a lease we keep alive until ``release``."""

    def __init__(self, client: Any, lease: Any, view: LeaderView, ttl: int, margin: float,
                 granted_at: float | None = None):
        super().__init__(view, ttl, margin, granted_at)
        self._client = client
        self.lease = lease

    def _renew(self) -> float | None:
        try:
            responses = list(self._client.refresh_lease(self.lease.id))
        except Exception as exc:  # noqa: BLE001
            if is_etcd_failure(exc):
                return None
            raise
        return responses[-1].TTL if responses else 0

    def still_holds_key(self, key: str) -> bool:
        value, meta = self._client.get(key)
        return meta is not None and meta.create_revision == self.view.view_version

    def release(self) -> None:
        """Give leadership up: revoke the lease (best effort, bounded by the client timeout)."""
        self.released = True
        try:
            self._client.revoke_lease(self.lease.id)
        except Exception as exc:  # noqa: BLE001
            if not is_etcd_failure(exc):
                raise


class LeaderElection:
    def __init__(self, client: Any, cluster: str, address: str, ttl: int = 2,
                 margin: float = 0.3):
        self.client = client
        self.key = master_view_key(cluster)
        self.address = address
        self.ttl = ttl
        self.margin = margin

    def current(self) -> LeaderView | None:
        value, meta = self.client.get(self.key)
        if meta is None:
            return None
        return LeaderView(value.decode(errors="replace"), meta.create_revision, meta.lease_id)

    def try_acquire(self) -> LeaderSession | None:
        sent = time.monotonic()
        lease = self.client.lease(self.ttl)
        tx = self.client.transactions
        ok, _ = self.client.transaction(
            compare=[tx.create(self.key) == 0],
            success=[tx.put(self.key, self.address, lease)],
            failure=[],
        )
        if not ok:
            try:
                self.client.revoke_lease(lease.id)
            except Exception as exc:  # noqa: BLE001
                if not is_etcd_failure(exc):
                    raise
            return None
        view = self.current()
        if view is None or view.lease_id != lease.id:
            return None
        return LeaderSession(self.client, lease, view, lease.ttl or self.ttl, self.margin,
                             granted_at=sent)
