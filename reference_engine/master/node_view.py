"""What the admin server and the metrics see of a master: a narrow, read-only view, plus the two
actions the admin API offers.

``MasterNode`` implements both; ``admin`` and ``metrics`` import this module, never the node, so
the node can own its admin server without an import circle. Replication numbers come as one
frozen sample taken when asked, so a scrape never reaches into the standby or the service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from reference_engine.master.election import LeaderView
    from reference_engine.master.master_policies import LagMetric
    from reference_engine.master.promotion import ValidationReport
    from reference_engine.master.service import MasterService
    from reference_engine.master.standby import HotStandby


@dataclass(frozen=True)
class LeaderReplication:
    """The serving leader's OpLog writer and request counts."""

    durable_seq: int
    last_batch_id: int
    retries: int
    requests: tuple[tuple[str, int], ...]
    """(op, count), sorted by op."""
    active_clients: int


@dataclass(frozen=True)
class StandbyReplication:
    """A standby's state machine and applier."""

    state: int
    transitions_total: int
    applied_entries: int
    corrupt_payloads: int
    snapshot_seq: int
    """Last included sequence of the snapshot the standby started from (0: none)."""


@dataclass(frozen=True)
class Replication:
    applied_seq: int
    primary_seq: int
    lag: int
    """As the profile exports it (legacy: always 0)."""
    leader: LeaderReplication | None = None
    standby: StandbyReplication | None = None


def sample_replication(service: MasterService | None, standby: HotStandby | None,
                       lag: LagMetric) -> Replication:
    """The leader's numbers when serving, else the standby's, else zeros."""
    if service is not None:
        writer = service.writer
        durable = writer.durable_seq
        leader = LeaderReplication(durable, writer.prefix.prefix.batch_id, writer.retries,
                                   tuple(sorted(service.requests.items())), len(service.clients))
        return Replication(durable, durable, lag.value(durable, durable), leader=leader)
    if standby is not None:
        applied, primary = standby.applier.applied_seq, standby.primary_seq
        snap = standby.snapshot_loaded
        sample = StandbyReplication(int(standby.machine.state), standby.machine.transitions_total,
                                    standby.applier.stats.applied_entries,
                                    standby.applier.stats.corrupt_payloads,
                                    snap.last_included_seq if snap else 0)
        return Replication(applied, primary, lag.value(applied, primary), standby=sample)
    return Replication(0, 0, lag.value(0, 0))


class MasterView(Protocol):
    """Read-only: what a master is, whom it follows, what it holds."""

    @property
    def address(self) -> str: ...

    @property
    def profile_name(self) -> str: ...

    @property
    def role(self) -> str:
        """``leader`` or ``standby``."""
        ...

    @property
    def runtime_state(self) -> str: ...

    @property
    def serving(self) -> bool: ...

    @property
    def view_version(self) -> int: ...

    @property
    def leader_view(self) -> LeaderView | None: ...

    @property
    def last_validation(self) -> ValidationReport | None: ...

    @property
    def counters(self) -> Mapping[str, int]: ...

    @property
    def snapshot_counters(self) -> Mapping[str, int]: ...

    def key_count(self) -> int: ...

    def keys(self) -> list[str]: ...

    def promotability(self) -> dict[str, Any]: ...

    def replication(self) -> Replication: ...


class MasterActions(Protocol):
    """The admin API's two actions."""

    def request_promotion(self, timeout: float) -> tuple[int, dict[str, Any]]:
        """Planned handover to this standby: HTTP status and body."""
        ...

    def write_snapshot(self) -> dict[str, Any]: ...
