"""Prometheus text for one master: index, clients, HA replication and promotion counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reference_engine.master.node import MasterNode


def render_metrics(node: MasterNode) -> str:
    lines: list[str] = []

    def metric(name: str, value: float, kind: str = "gauge", help_text: str = "") -> None:
        if help_text:
            lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name} {float(value):g}" if not float(value).is_integer() else f"{name} {int(value)}")

    service, standby = node.service, node.standby
    metric("master_key_count", node.key_count(), help_text="objects this master holds")
    metric("service_ready", 1 if node.serving else 0, help_text="1 while serving as leader")
    metric("master_active_clients", len(service.clients) if service else 0)
    metric("master_is_leader", 1 if node.role == "leader" else 0)
    metric("ha_view_version", node.view_version)
    if service is not None:
        applied = primary = service.writer.durable_seq
        metric("ha_batch_record_durable_sequence", service.writer.durable_seq)
        metric("ha_batch_record_last_batch_id", service.writer.prefix.prefix.batch_id)
        metric("ha_batch_record_retry_total", service.writer.retries, "counter")
        for op, count in sorted(service.requests.items()):
            metric(f"master_{op}_requests_total", count, "counter")
    elif standby is not None:
        applied, primary = standby.applier.applied_seq, standby.primary_seq
        metric("ha_standby_state", int(standby.machine.state))
        metric("ha_state_transitions_total", standby.machine.transitions_total, "counter")
        metric("ha_oplog_applied_entries_total", standby.applier.stats.applied_entries, "counter")
        metric("ha_oplog_corrupt_payloads_total", standby.applier.stats.corrupt_payloads, "counter")
        snap = standby.snapshot_loaded
        metric("ha_standby_snapshot_sequence_id", snap.last_included_seq if snap else 0,
               help_text="last included sequence of the snapshot this standby started from "
                         "(0: none, its baseline is a full OpLog replay)")
    else:
        applied = primary = 0
    metric("ha_oplog_applied_sequence_id", applied)
    metric("ha_oplog_last_sequence_id", primary)
    metric("ha_oplog_standby_lag", node.policies.lag.value(applied, primary),
           help_text="entries behind the durable prefix (legacy profile: always 0, as 0.3.13)")
    metric("ha_promotions_total", node.counters["promotions"], "counter")
    metric("ha_promotions_refused_total", node.counters["promotions_refused"], "counter",
           "promotions refused because the dry run or catch-up failed")
    metric("ha_step_downs_total", node.counters["step_downs"], "counter")
    report = node.last_validation
    metric("ha_restore_dropped_entries", report.dropped_entries if report else 0)
    metric("master_rejected_client_versions_total", node.counters["rejected_client_versions"], "counter")
    metric("master_snapshot_success", node.snapshot_counters["success"], "counter")
    metric("master_snapshot_fail", node.snapshot_counters["fail"], "counter")
    return "\n".join(lines) + "\n"
