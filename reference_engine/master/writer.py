"""The leader's ordered OpLog writer: gap-free sequence ids, group commit, fencing.

Mutations ``append`` under the service lock (so OpLog order is index order), then wait outside
it for their sequence to become durable. One flusher thread commits whatever is pending as one
batch record. An etcd that does not answer is retried (an ambiguous commit is resolved by reading
the prefix back); a refused commit means we are fenced: every waiter fails and ``on_fenced``
fires. A write is acknowledged only once durable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from reference_engine.master.error_codes import ErrorCode, MasterError
from reference_engine.master.ha_failures import is_ha_store_failure
from reference_engine.master.oplog import BatchRecord, OpLogEntry, OpType
from reference_engine.master.oplog_store import Fenced, OpLogInconsistent, OpLogStore, StoredPrefix

log = logging.getLogger("reference_engine.master.writer")


class OpLogWriter:
    def __init__(
        self,
        store: OpLogStore,
        view: int,
        start: StoredPrefix,
        batch_max_entries: int = 1024,
        retry_interval: float = 0.05,
        on_fenced: Callable[[str], None] | None = None,
    ):
        self.store = store
        self.view = view
        self.prefix = start
        self.batch_max_entries = batch_max_entries
        self.retry_interval = retry_interval
        self.on_fenced = on_fenced
        self._cond = threading.Condition()
        self._pending: list[OpLogEntry] = []
        self._next_seq = start.prefix.last_seq + 1
        self.durable_seq = start.prefix.last_seq
        self.failed: str | None = None
        self.commits = 0
        self.retries = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="oplog-writer", daemon=True)
        self._thread.start()

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def append(self, op_type: OpType, key: str, payload: bytes = b"") -> int:
        with self._cond:
            if self.failed:
                raise MasterError(ErrorCode.NOT_LEADER, f"OpLog writer stopped: {self.failed}")
            seq = self._next_seq
            self._next_seq += 1
            self._pending.append(OpLogEntry(seq, op_type, key, payload))
            self._cond.notify_all()
            return seq

    def wait_durable(self, seq: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.durable_seq < seq:
                if self.failed:
                    raise MasterError(ErrorCode.NOT_LEADER, f"write not durable: {self.failed}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MasterError(
                        ErrorCode.OPLOG_UNAVAILABLE,
                        f"sequence {seq} not durable within {timeout:.1f}s (HA store unreachable?)",
                    )
                self._cond.wait(left)

    def stop(self, reason: str = "stopped") -> None:
        with self._cond:
            self._stopped = True
            if not self.failed:
                self.failed = reason
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _fail(self, reason: str) -> None:
        with self._cond:
            first = self.failed is None
            self.failed = reason
            self._cond.notify_all()
        if first and self.on_fenced:
            self.on_fenced(reason)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                batch = self._pending[: self.batch_max_entries]
            record = BatchRecord(self.prefix.prefix.batch_id + 1, batch[0].sequence_id, tuple(batch))
            try:
                new_prefix = self._commit(record)
            except Fenced as exc:
                log.error("OpLog writer fenced: %s", exc)
                self._fail(f"fenced: {exc}")
                return
            except OpLogInconsistent as exc:
                log.error("OpLog inconsistent: %s", exc)
                self._fail(f"inconsistent OpLog: {exc}")
                return
            if new_prefix is None:
                with self._cond:
                    if self._stopped:
                        return
                    self._cond.wait(self.retry_interval)
                continue
            with self._cond:
                self.prefix = new_prefix
                del self._pending[: len(batch)]
                self.durable_seq = record.last_seq
                self.commits += 1
                self._cond.notify_all()

    def _commit(self, record: BatchRecord) -> StoredPrefix | None:
        """Commit, or None to retry later (etcd did not answer and nothing was committed)."""
        try:
            return self.store.commit(self.prefix, record, self.view)
        except Exception as exc:  # noqa: BLE001
            if not is_ha_store_failure(exc):
                raise
            self.retries += 1
        try:
            now = self.store.read_prefix()
        except Exception as exc:  # noqa: BLE001
            if not is_ha_store_failure(exc):
                raise
            return None
        if now.prefix.batch_id == record.batch_id and now.prefix.last_seq == record.last_seq:
            return now
        if now.raw == self.prefix.raw:
            return None
        raise Fenced(f"durable prefix moved to {now.prefix} while committing batch {record.batch_id}")
