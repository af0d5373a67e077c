"""RDMA settings from an environment mapping (Mooncake's ``MC_*`` names and defaults).

The mapping is passed in (never read from ``os.environ`` here) so tests choose it.
Invalid values are rejected with the variable's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside {lo}..{hi}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise ValueError(f"{name}={value} must not be negative")
    return value


@dataclass(frozen=True)
class RdmaConfig:
    workers_per_ctx: int = 2
    num_cq_per_ctx: int = 1
    num_qp_per_ep: int = 2
    max_wr: int = 256
    max_cqe: int = 4096
    max_ep_per_ctx: int = 65536
    store_type: str = "SIEVE"
    retry_cnt: int = 9
    slice_size: int = 65536
    rail_pause_seconds: float = 30.0
    destroy_timeout: float = 30.0
    poll_batch: int = 64
    shards: int = 8
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> RdmaConfig:
        env = dict(env or {})
        store = env.get("MC_ENDPOINT_STORE_TYPE", "SIEVE").upper()
        if store not in ("FIFO", "SIEVE"):
            raise ValueError(f"MC_ENDPOINT_STORE_TYPE={store!r} must be FIFO or SIEVE")
        values = dict(
            workers_per_ctx=_int(env, "MC_WORKERS_PER_CTX", 2, 1, 8),
            num_cq_per_ctx=_int(env, "MC_NUM_CQ_PER_CTX", 1, 1, 256),
            num_qp_per_ep=_int(env, "MC_NUM_QP_PER_EP", 2, 1, 256),
            max_wr=_int(env, "MC_MAX_WR", 256, 1, 1 << 16),
            max_cqe=_int(env, "MC_MAX_CQE_PER_CTX", 4096, 1, 1 << 22),
            max_ep_per_ctx=_int(env, "MC_MAX_EP_PER_CTX", 65536, 1, 1 << 20),
            store_type=store,
            retry_cnt=_int(env, "MC_RETRY_CNT", 9, 1, 127),
            slice_size=_int(env, "MC_SLICE_SIZE", 65536, 1, 1 << 30),
            rail_pause_seconds=_float(env, "MC_RDMA_RAIL_PAUSE_SECONDS", 30.0),
            destroy_timeout=_float(env, "MC_RDMA_DESTROY_TIMEOUT_SECONDS", 30.0),
            env=env,
        )
        values.update(overrides)
        return cls(**values)
