"""The OpLog in Redis, laid out as Mooncake's Redis OpLog backend keeps it (0.3.14's
``--ha_backend_type=redis`` with ``--enable_oplog``).

Mooncake's layout (``mooncake-store/src/ha/kv/redis_ha_kv_backend.cpp``): the logical keys of
the etcd OpLog (``/oplog/<cluster>/batches/<id:020d>``, ``.../durable_prefix``,
``.../producer_view``) are plain strings at ``mooncake-store/{<cluster>}/oplog/<rest>`` (the
cluster as a Redis Cluster hash tag, like the leader hash), and a sorted set
``mooncake-store/{<cluster>}/oplog-index`` holds every logical key with score 0, so a range of
batches is a lexicographic range of that set. A transaction is one Lua script comparing values
(equal, or absent) before its writes.

Fencing: Mooncake's Redis backend refuses etcd's CreateRevision compare, so its writer is fenced
by the producer view alone. The reference fences as it does on etcd, by both: a commit also
compares the leader hash's ``view_version`` with the writer's view, in the same script (the hash
and the OpLog share one hash tag), so a leader whose lease ran out cannot append even before a
successor claimed the producer view. Same interface as ``oplog_store.OpLogStore``.
"""

from __future__ import annotations

from typing import Any

from reference_engine.master.oplog import BatchRecord, DurablePrefix, OpLogKeys
from reference_engine.master.oplog_store import (
    Fenced,
    OpLogInconsistent,
    StoredPrefix,
    contiguous_batches,
    stored_prefix,
)
from reference_engine.master.redis_election import hash_tag, master_view_key

CLAIM = """
local current = redis.call('GET', KEYS[1])
if current and tonumber(current) and tonumber(current) > tonumber(ARGV[1]) then
  return {-1, current}
end
if redis.call('HGET', KEYS[2], 'view_version') ~= ARGV[1] then
  return {-2, ''}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[2])
return {1, ''}
"""
COMMIT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('HGET', KEYS[2], 'view_version') ~= ARGV[1] then
  return 0
end
local prefix = redis.call('GET', KEYS[3])
if ARGV[3] == 'absent' then
  if prefix then
    return 0
  end
elseif prefix ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[4], ARGV[4])
redis.call('SET', KEYS[3], ARGV[5])
redis.call('ZADD', KEYS[5], 0, ARGV[6], 0, ARGV[7])
return 1
"""
RANGE = """
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
local out = {}
for _, logical in ipairs(members) do
  table.insert(out, logical)
  table.insert(out, redis.call('GET', ARGV[5] .. string.sub(logical, #ARGV[4] + 1)) or '')
end
return out
"""
TRIM = """
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2])
local deleted = 0
for _, logical in ipairs(members) do
  deleted = deleted + redis.call('DEL', ARGV[4] .. string.sub(logical, #ARGV[3] + 1))
  redis.call('ZREM', KEYS[1], logical)
end
return deleted
"""


class RedisOpLogKeys:
    """Where each logical OpLog key of one cluster lives in Redis."""

    def __init__(self, cluster: str):
        self.logical = OpLogKeys(cluster)
        tag = hash_tag(self.logical.cluster)
        self.prefix = "mooncake-store/{" + tag + "}/oplog/"
        self.index = "mooncake-store/{" + tag + "}/oplog-index"

    def redis_key(self, logical: str) -> str:
        root = self.logical.root
        if not logical.startswith(root):
            raise ValueError(f"{logical!r} is not an OpLog key of cluster {self.logical.cluster}")
        return self.prefix + logical[len(root):]


class RedisOpLogStore:
    def __init__(self, client: Any, cluster: str):
        self.client = client
        self.keys = OpLogKeys(cluster)
        self.layout = RedisOpLogKeys(cluster)
        self.leader_key = master_view_key(cluster)
        self._claim = client.register_script(CLAIM)
        self._commit = client.register_script(COMMIT)
        self._range = client.register_script(RANGE)
        self._trim = client.register_script(TRIM)

    # ---------------------------------------------------------------- reads

    def read_prefix(self) -> StoredPrefix:
        return stored_prefix(self.client.get(self.layout.redis_key(self.keys.durable_prefix)),
                             self.keys.durable_prefix)

    def read_batches(self, after_batch_id: int, upto_batch_id: int,
                     limit: int = 1024) -> list[BatchRecord]:
        """Batches ``after_batch_id+1 .. upto_batch_id`` (at most ``limit``), contiguous or an
        error; read in one script, so a trim cannot interleave."""
        if upto_batch_id <= after_batch_id:
            return []
        last = min(upto_batch_id, after_batch_id + limit)
        answer = self._range(
            keys=[self.layout.index],
            args=["[" + self.keys.batch(after_batch_id + 1), "(" + self.keys.batch(last + 1),
                  last - after_batch_id, self.keys.root, self.layout.prefix])
        found = ((key.decode(errors="replace"), raw or None)
                 for key, raw in zip(answer[::2], answer[1::2], strict=True))
        return contiguous_batches(found, after_batch_id, last, upto_batch_id, "Redis")

    def read_producer_view(self) -> int:
        raw = self.client.get(self.layout.redis_key(self.keys.producer_view))
        return int(raw) if raw is not None and raw.isdigit() else 0

    # ---------------------------------------------------------------- writes

    def claim_producer_view(self, view: int) -> None:
        """Make ``view`` the producer; refuses when a newer view already produces or the leader
        hash no longer carries ``view``."""
        code, current = self._claim(
            keys=[self.layout.redis_key(self.keys.producer_view), self.leader_key,
                  self.layout.index],
            args=[str(view), self.keys.producer_view])
        if int(code) == -1:
            raise Fenced(f"producer view {int(current)} is newer than ours ({view})")
        if int(code) != 1:
            raise Fenced(f"leader hash no longer has view {view}")

    def commit(self, expected: StoredPrefix, record: BatchRecord, view: int) -> StoredPrefix:
        """Append ``record`` after ``expected``; raises Fenced when we may not."""
        if (record.batch_id != expected.prefix.batch_id + 1
                or record.first_seq != expected.prefix.last_seq + 1):
            raise OpLogInconsistent(
                f"batch {record.batch_id}@{record.first_seq} does not extend prefix "
                f"{expected.prefix}")
        new = DurablePrefix(record.batch_id, record.last_seq)
        new_raw = new.encode()
        batch_key = self.keys.batch(record.batch_id)
        ok = self._commit(
            keys=[self.layout.redis_key(self.keys.producer_view), self.leader_key,
                  self.layout.redis_key(self.keys.durable_prefix),
                  self.layout.redis_key(batch_key), self.layout.index],
            args=[str(view), expected.raw or b"", "absent" if expected.raw is None else "equal",
                  record.encode(), new_raw, batch_key, self.keys.durable_prefix])
        if int(ok) != 1:
            raise Fenced(f"commit of batch {record.batch_id} refused: view {view} fenced or "
                         f"prefix moved")
        return StoredPrefix(new, new_raw)

    def trim(self, upto_batch_id: int) -> int:
        """Delete batch records ``<= upto_batch_id`` (covered by a snapshot); returns how many."""
        if upto_batch_id <= 0:
            return 0
        return int(self._trim(
            keys=[self.layout.index],
            args=["[" + self.keys.batch(1), "(" + self.keys.batch(upto_batch_id + 1),
                  self.keys.root, self.layout.prefix]))
