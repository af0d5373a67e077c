"""Whether an exception means "the HA store did not answer" (etcd or Redis), as opposed to a
programming error: the master, standby, writer and store client retry the first kind."""

from __future__ import annotations

from reference_engine.master.etcd_client import is_etcd_failure
from reference_engine.master.redis_client import is_redis_failure


def is_ha_store_failure(exc: BaseException) -> bool:
    return is_etcd_failure(exc) or is_redis_failure(exc)
