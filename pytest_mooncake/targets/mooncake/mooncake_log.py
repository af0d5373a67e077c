"""A real Mooncake engine's log lines as counters, for ``log_events``: what 0.3.12+ log when
their segment cache is refreshed (``transfer_metadata.cpp``: "Segment cache sync finished, ...
fetched=N, updated=N, unchanged=N, failed=N") and when a TCP connection to a peer fails.
Mooncake logs no replacement, retired endpoint or exhausted retry budget: those stay absent."""

from pytest_mooncake.targets.log_events import rule

SYNC = r"Segment cache sync finished,.*\b"
RULES = (
    rule("refresh_ok", SYNC + r"fetched=(?P<amount>\d+)"),
    rule("snapshots_replaced", SYNC + r"updated=(?P<amount>\d+)"),
    rule("refresh_failed", SYNC + r"failed=(?P<amount>\d+)"),
    rule("transport_failures", r"TCP lane connection to \S+ failed"),
)
