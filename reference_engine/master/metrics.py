"""Prometheus text for one master: index, clients, HA replication and promotion counters."""

from __future__ import annotations

from reference_engine.master.node_view import MasterView


def render_metrics(view: MasterView) -> str:
    lines: list[str] = []

    def metric(name: str, value: float, kind: str = "gauge", help_text: str = "") -> None:
        if help_text:
            lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name} {float(value):g}" if not float(value).is_integer() else f"{name} {int(value)}")

    rep = view.replication()
    leader, standby = rep.leader, rep.standby
    counters, snapshots = view.counters, view.snapshot_counters
    metric("master_key_count", view.key_count(), help_text="objects this master holds")
    metric("service_ready", 1 if view.serving else 0, help_text="1 while serving as leader")
    metric("master_active_clients", leader.active_clients if leader else 0)
    metric("master_is_leader", 1 if view.role == "leader" else 0)
    metric("ha_view_version", view.view_version)
    if leader is not None:
        metric("ha_batch_record_durable_sequence", leader.durable_seq)
        metric("ha_batch_record_last_batch_id", leader.last_batch_id)
        metric("ha_batch_record_retry_total", leader.retries, "counter")
        for op, count in leader.requests:
            metric(f"master_{op}_requests_total", count, "counter")
    elif standby is not None:
        metric("ha_standby_state", standby.state)
        metric("ha_state_transitions_total", standby.transitions_total, "counter")
        metric("ha_oplog_applied_entries_total", standby.applied_entries, "counter")
        metric("ha_oplog_corrupt_payloads_total", standby.corrupt_payloads, "counter")
        metric("ha_standby_snapshot_sequence_id", standby.snapshot_seq,
               help_text="last included sequence of the snapshot this standby started from "
                         "(0: none, its baseline is a full OpLog replay)")
    metric("ha_oplog_applied_sequence_id", rep.applied_seq)
    metric("ha_oplog_last_sequence_id", rep.primary_seq)
    metric("ha_oplog_standby_lag", rep.lag,
           help_text="entries behind the durable prefix (legacy profile: always 0, as 0.3.13)")
    metric("ha_promotions_total", counters.get("promotions", 0), "counter")
    metric("ha_promotions_refused_total", counters.get("promotions_refused", 0), "counter",
           "promotions refused because the dry run or catch-up failed")
    metric("ha_step_downs_total", counters.get("step_downs", 0), "counter")
    report = view.last_validation
    metric("ha_restore_dropped_entries", report.dropped_entries if report else 0)
    metric("master_rejected_client_versions_total", counters.get("rejected_client_versions", 0),
           "counter")
    metric("master_snapshot_success", snapshots.get("success", 0), "counter")
    metric("master_snapshot_fail", snapshots.get("fail", 0), "counter")
    return "\n".join(lines) + "\n"
