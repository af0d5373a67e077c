"""How a real build's cache bound is set and read (``cache_knobs``) and how engine logs are
read as counters (``log_events``), on the lines the builds actually print."""

from __future__ import annotations

import pytest

from pytest_mooncake.targets.log_events import count_events
from pytest_mooncake.targets.mooncake import mooncake_log
from pytest_mooncake.targets.mooncake.cache_knobs import (
    NO_CACHE_ENV,
    REFRESH_ENV,
    CacheKnobs,
    bound_ms,
)
from pytest_mooncake.targets.reference import reference_log


def test_ttl_rounds_up_to_whole_seconds_and_zero_turns_the_cache_off():
    knobs = CacheKnobs.of([REFRESH_ENV, NO_CACHE_ENV, "MC_TCP_BIND_ADDRESS"], "mooncake 0.3.13")
    assert knobs.missing() is None
    assert knobs.env_for(200) == {REFRESH_ENV: "1"}
    assert knobs.env_for(1000) == {REFRESH_ENV: "1"}
    assert knobs.env_for(1001) == {REFRESH_ENV: "2"}
    assert knobs.env_for(0) == {NO_CACHE_ENV: "1"}
    with pytest.raises(ValueError, match="ttl_ms must be >= 0"):
        knobs.env_for(-1)


def test_a_build_that_does_not_read_the_interval_has_no_bound():
    knobs = CacheKnobs.of([NO_CACHE_ENV], "mooncake 0.3.11")
    reason = knobs.missing()
    assert reason and REFRESH_ENV in reason and "0.3.11" in reason


def test_bound_as_the_build_reads_its_environment():
    assert bound_ms({}) is None
    assert bound_ms({REFRESH_ENV: "0"}) is None
    assert bound_ms({REFRESH_ENV: "3"}) == 3000.0
    assert bound_ms({REFRESH_ENV: "0.5"}) is None  # a fraction is ignored: no refresh
    assert bound_ms({REFRESH_ENV: "3", NO_CACHE_ENV: ""}) == 0.0


MOONCAKE_LOG = """\
I1201 18:58:19.260911 19997 transfer_metadata.cpp:1265] Segment cache sync finished, requested_segment=<all>, scanned=1, fetched=1, updated=0, unchanged=1, failed=0, skipped=0, sync_duration_ms=1
E1201 18:58:22.092981 20032 tcp_transport_lane_impl.h:1088] TCP lane connection to 127.0.0.1:16317 failed: Connection refused (attempt failure 1)
I1201 18:58:22.317919 19997 transfer_metadata.cpp:1265] Segment cache sync finished, requested_segment=<all>, scanned=1, fetched=1, updated=1, unchanged=0, failed=0, skipped=0, sync_duration_ms=34
I1201 18:58:28.318804 19997 transfer_metadata.cpp:1265] Segment cache sync finished, requested_segment=<all>, scanned=2, fetched=0, updated=0, unchanged=0, failed=2, skipped=0, sync_duration_ms=5000
"""

REFERENCE_LOG = """\
2026-12-01 18:33:19,186 I reference_engine.cache] snapshot of seg-a replaced
2026-12-01 18:33:19,187 W reference_engine.cache_policies] replacement of seg-a observed: instance 1f.. -> 2a..
2026-12-01 18:33:19,188 I reference_engine.engine.core] retired connections of seg-a at 127.0.0.1:4000 (1 idle closed): instance replaced
2026-12-01 18:33:20,001 W reference_engine.cache] ordinary refresh of seg-a failed, keeping the cached snapshot: OSError: refused
2026-12-01 18:33:20,002 I reference_engine.engine.core] transfer to seg-a failed (refused); forcing a refresh, retry 1 of 3
"""


def test_mooncake_sync_lines_count_fetches_updates_and_failures():
    assert count_events(MOONCAKE_LOG, mooncake_log.RULES) == {
        "refresh_ok": 2, "snapshots_replaced": 1, "refresh_failed": 2, "transport_failures": 1}


def test_reference_lines_count_by_event_and_an_unlogged_event_is_absent():
    counts = count_events(REFERENCE_LOG, reference_log.RULES)
    assert counts == {"snapshots_replaced": 1, "replacements": 1, "endpoints_retired": 1,
                      "refresh_failed": 1, "refresh_forced": 1}
    assert "retries_exhausted" not in counts
