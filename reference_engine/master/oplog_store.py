"""The OpLog in etcd: fenced batch commits by the leader, prefix-bounded reads by standbys.

A commit is one transaction: compare the producer view and the leader key's CreateRevision
with the writer's view (so a deposed leader can never append), compare the durable prefix with
the one the writer extends, then put the batch record and the new prefix together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from reference_engine.master.oplog import BatchRecord, DurablePrefix, OpLogKeys, master_view_key


class Fenced(Exception):
    """The writer is no longer the producer (another leader, or its lease is gone)."""


class OpLogInconsistent(Exception):
    """What etcd holds breaks the OpLog's invariants (gap, regression, undecodable record)."""


@dataclass(frozen=True)
class StoredPrefix:
    prefix: DurablePrefix
    raw: bytes | None
    """The exact bytes in etcd (None when the key is absent), compared in transactions."""


def stored_prefix(raw: bytes | None, key: str) -> StoredPrefix:
    """The durable prefix stored as ``raw`` at ``key`` (None: absent, the empty prefix)."""
    if raw is None:
        return StoredPrefix(DurablePrefix(), None)
    try:
        return StoredPrefix(DurablePrefix.decode(raw, key), raw)
    except ValueError as exc:
        raise OpLogInconsistent(str(exc)) from None


def contiguous_batches(found: Iterable[tuple[str, bytes | None]], after_batch_id: int,
                       last: int, upto_batch_id: int, where: str) -> list[BatchRecord]:
    """The records of batches ``after_batch_id+1 .. last`` from ``(key, raw)`` pairs in key
    order (raw None: the record is gone), or ``OpLogInconsistent`` naming the first one that
    is missing, out of order or undecodable in ``where``."""
    out = []
    expected = after_batch_id + 1
    for key, raw in found:
        if raw is None:
            break
        try:
            rec = BatchRecord.decode(raw, key)
        except ValueError as exc:
            raise OpLogInconsistent(str(exc)) from None
        if rec.batch_id != expected:
            raise OpLogInconsistent(f"{key}: expected batch {expected}, found {rec.batch_id}")
        out.append(rec)
        expected += 1
    if expected <= last:
        raise OpLogInconsistent(f"batch {expected} is missing from {where} (trimmed or lost); "
                                f"prefix is at batch {upto_batch_id}")
    return out


class OpLogStore:
    def __init__(self, client: Any, cluster: str):
        self.client = client
        self.keys = OpLogKeys(cluster)
        self.leader_key = master_view_key(cluster)

    # ---------------------------------------------------------------- reads

    def read_prefix(self) -> StoredPrefix:
        return stored_prefix(self.client.get(self.keys.durable_prefix)[0],
                             self.keys.durable_prefix)

    def read_batches(self, after_batch_id: int, upto_batch_id: int, limit: int = 1024) -> list[BatchRecord]:
        """Batches ``after_batch_id+1 .. upto_batch_id`` (at most ``limit``), contiguous or an error."""
        if upto_batch_id <= after_batch_id:
            return []
        last = min(upto_batch_id, after_batch_id + limit)
        start = self.keys.batch(after_batch_id + 1)
        end = self.keys.batch(last + 1)
        found = ((meta.key.decode(), raw) for raw, meta in self.client.get_range(start, end))
        return contiguous_batches(found, after_batch_id, last, upto_batch_id, "etcd")

    def read_producer_view(self) -> int:
        raw, _ = self.client.get(self.keys.producer_view)
        return int(raw) if raw is not None and raw.isdigit() else 0

    # ---------------------------------------------------------------- writes

    def claim_producer_view(self, view: int) -> None:
        """Make ``view`` the producer; refuses when a newer view already produces."""
        tx = self.client.transactions
        key = self.keys.producer_view
        for _ in range(8):
            raw, _ = self.client.get(key)
            if raw is None:
                compare = [tx.version(key) == 0]
            else:
                if int(raw) > view:
                    raise Fenced(f"producer view {int(raw)} is newer than ours ({view})")
                compare = [tx.value(key) == raw]
            compare.append(tx.create(self.leader_key) == view)
            ok, _ = self.client.transaction(compare=compare, success=[tx.put(key, str(view))], failure=[])
            if ok:
                return
            current = self.client.get(self.leader_key)[1]
            if current is None or current.create_revision != view:
                raise Fenced(f"leader key no longer has view {view}")
        raise Fenced("producer view kept changing under us")

    def commit(self, expected: StoredPrefix, record: BatchRecord, view: int) -> StoredPrefix:
        """Append ``record`` after ``expected``; raises Fenced when we may not."""
        if record.batch_id != expected.prefix.batch_id + 1 or record.first_seq != expected.prefix.last_seq + 1:
            raise OpLogInconsistent(
                f"batch {record.batch_id}@{record.first_seq} does not extend prefix {expected.prefix}"
            )
        new = DurablePrefix(record.batch_id, record.last_seq)
        new_raw = new.encode()
        tx = self.client.transactions
        compare = [
            tx.value(self.keys.producer_view) == str(view),
            tx.create(self.leader_key) == view,
        ]
        if expected.raw is None:
            compare.append(tx.version(self.keys.durable_prefix) == 0)
        else:
            compare.append(tx.value(self.keys.durable_prefix) == expected.raw)
        ok, _ = self.client.transaction(
            compare=compare,
            success=[tx.put(self.keys.batch(record.batch_id), record.encode()),
                     tx.put(self.keys.durable_prefix, new_raw)],
            failure=[],
        )
        if not ok:
            raise Fenced(f"commit of batch {record.batch_id} refused: view {view} fenced or prefix moved")
        return StoredPrefix(new, new_raw)


    def trim(self, upto_batch_id: int) -> int:
        """Delete batch records ``<= upto_batch_id`` (covered by a snapshot); returns how many."""
        if upto_batch_id <= 0:
            return 0
        deleted = 0
        start, end = self.keys.batch(1), self.keys.batch(upto_batch_id + 1)
        for _, meta in self.client.get_range(start, end, keys_only=True):
            if self.client.delete(meta.key):
                deleted += 1
        return deleted
