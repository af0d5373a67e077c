"""Checkers on hand-built histories: each property passes on a good history and fails, naming
the offending ops, on a bad one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_mooncake.chaos.checkers import (
    bounded_recovery,
    check,
    no_lost_acks,
    no_phantom_reads,
    no_stale_reads,
    no_torn_descriptors,
    transfers_reach_new_instance,
)
from pytest_mooncake.chaos.history import NEMESIS, History, Op, pair


class Build:
    """Calls with explicit times (in ms); ``ops()`` sorts them into a history."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def call(self, process: int | str, f: str, key: Any, start: float, end: float | None,
             type: str = "ok", arg: Any = None, result: Any = None,
             instance: str | None = None, final: bool = False) -> Build:
        self.events.append(dict(type="invoke", f=f, process=process, time=int(start * 1e6),
                                key=key, value=arg, final=final))
        if end is not None:
            self.events.append(dict(type=type, f=f, process=process, time=int(end * 1e6),
                                    key=key, value=result if type == "ok" else None,
                                    error=None if type == "ok" else "boom", instance=instance,
                                    final=final))
        return self

    def put(self, p: int, key: str, value: str, start: float, end: float | None,
            type: str = "ok") -> Build:
        return self.call(p, "put", key, start, end, type, arg=value)

    def get(self, p: int, key: str, seen: Any, start: float, end: float,
            final: bool = False) -> Build:
        return self.call(p, "get", key, start, end, "ok", result=seen, final=final)

    def ops(self) -> list[Op]:
        ordered = sorted(self.events, key=lambda e: e["time"])
        return [Op(index=i, **e) for i, e in enumerate(ordered)]


# ------------------------------------------------------------------ lost acks


def test_final_read_sees_acknowledged_put() -> None:
    h = Build().put(0, "k", "a", 0, 1).put(1, "k", "b", 2, 3).get(0, "k", "b", 10, 11, final=True)
    result = no_lost_acks(h.ops())
    assert result.valid is True, result


def test_lost_ack_is_reported_with_its_ops() -> None:
    h = (Build().put(0, "k", "a", 0, 1).put(1, "k", "b", 2, 3)
         .get(0, "k", "a", 10, 11, final=True))
    result = no_lost_acks(h.ops())
    assert result.valid is False
    assert "k='b'" in result.explanation and "lost" in result.explanation
    assert {op.f for op in result.ops} == {"put", "get"}
    assert any(op.value == "b" for op in result.ops)


def test_key_absent_at_the_end_is_a_lost_ack_unless_removed() -> None:
    lost = Build().put(0, "k", "a", 0, 1).get(0, "k", None, 10, 11, final=True)
    assert no_lost_acks(lost.ops()).valid is False
    removed = (Build().put(0, "k", "a", 0, 1).call(1, "remove", "k", 2, 3)
               .get(0, "k", None, 10, 11, final=True))
    assert no_lost_acks(removed.ops()).valid is True


def test_concurrent_or_indeterminate_write_explains_the_final_value() -> None:
    concurrent = (Build().put(0, "k", "a", 0, 5).put(1, "k", "b", 1, 4)
                  .get(0, "k", "a", 10, 11, final=True))
    assert no_lost_acks(concurrent.ops()).valid is True
    crashed = (Build().put(0, "k", "b", 0, 1).put(1, "k", "a", 2, 3, type="info")
               .get(0, "k", "a", 10, 11, final=True))
    assert no_lost_acks(crashed.ops()).valid is True
    failed = (Build().put(0, "k", "b", 0, 1).put(1, "k", "a", 2, 3, type="fail")
              .get(0, "k", "a", 10, 11, final=True))
    verdict = check(failed.ops(), no_lost_acks, no_phantom_reads)
    assert verdict["no-phantom-reads"].valid is False  # reported once, as a phantom


def test_final_scan_sees_every_acknowledged_put() -> None:
    good = (Build().put(0, "a", "1", 0, 1).put(1, "b", "2", 0, 1)
            .call(0, "scan", None, 5, 6, result={"a": "1", "b": "2"}, final=True))
    assert no_lost_acks(good.ops()).valid is True
    bad = (Build().put(0, "a", "1", 0, 1).put(1, "b", "2", 0, 1)
           .call(0, "scan", None, 5, 6, result={"a": "1"}, final=True))
    result = no_lost_acks(bad.ops())
    assert result.valid is False and "b='2'" in result.explanation


def test_no_final_read_is_undecided() -> None:
    h = Build().put(0, "k", "a", 0, 1).get(0, "k", "a", 2, 3)
    assert no_lost_acks(h.ops()).valid is None


def test_stale_read_during_the_run() -> None:
    h = Build().put(0, "k", "a", 0, 1).put(0, "k", "b", 2, 3).get(1, "k", "a", 4, 5)
    assert no_lost_acks(h.ops()).valid is None  # no final read
    result = no_stale_reads(h.ops())
    assert result.valid is False and "stale" in result.explanation


# ------------------------------------------------------------------ phantom reads


def test_phantom_read() -> None:
    good = Build().put(0, "k", "a", 0, 1).get(1, "k", "a", 2, 3).get(1, "k", None, 4, 5)
    assert no_phantom_reads(good.ops()).valid is True
    concurrent = Build().put(0, "k", "a", 0, 10).get(1, "k", "a", 2, 3)
    assert no_phantom_reads(concurrent.ops()).valid is True
    bad = Build().put(0, "k", "a", 0, 1).get(1, "k", "zzz", 2, 3)
    result = no_phantom_reads(bad.ops())
    assert result.valid is False
    assert "zzz" in result.explanation and "never written" in result.explanation
    assert [op.f for op in result.ops] == ["get", "get"]


def test_reading_a_failed_put_or_a_future_put_is_phantom() -> None:
    failed = Build().put(0, "k", "a", 0, 1, type="fail").get(1, "k", "a", 2, 3)
    assert "failed" in no_phantom_reads(failed.ops()).explanation
    future = Build().get(1, "k", "a", 0, 1).put(0, "k", "a", 2, 3)
    assert "after the read" in no_phantom_reads(future.ops()).explanation


# ------------------------------------------------------------------ torn descriptors

V1 = {"name": "A", "instance": "i1", "buffers": [{"addr": 4096, "len": 64}]}
V2 = {"name": "A", "instance": "i2", "buffers": [{"addr": 8192, "len": 64}]}


def test_descriptor_equal_to_a_published_version() -> None:
    h = (Build().call(NEMESIS, "publish", "A", 0, 1, arg=V1)
         .call(0, "descriptor", "A", 2, 3, result=V1)
         .call(NEMESIS, "publish", "A", 4, 5, arg=V2)
         .call(0, "descriptor", "A", 4.5, 6, result=V2))
    assert no_torn_descriptors(h.ops()).valid is True


def test_torn_descriptor_names_the_mixed_fields() -> None:
    torn = dict(V2, instance="i1")
    h = (Build().call(NEMESIS, "publish", "A", 0, 1, arg=V1)
         .call(NEMESIS, "publish", "A", 4, 5, arg=V2)
         .call(0, "descriptor", "A", 6, 7, result=torn))
    result = no_torn_descriptors(h.ops())
    assert result.valid is False
    assert "from #0 in buffers; from #2 in instance" in result.explanation
    assert result.ops[-1].value == torn


# ------------------------------------------------------------------ replacement


def _replacement(served_after: str) -> Build:
    return (Build().call(0, "write", "A/0", 0, 1, arg="x", instance="i1")
            .call(NEMESIS, "inject", "A", 2, 3, type="info")
            .call(NEMESIS, "heal", "A", 3, 4, type="info", instance="i2")
            .call(0, "write", "A/1", 5, 6, arg="y", instance=served_after)
            .call(1, "read", "A/1", 3.5, 7, instance="i1"))


def test_transfers_after_replacement_reach_the_new_instance() -> None:
    result = transfers_reach_new_instance(_replacement("i2").ops())
    assert result.valid is True, result


def test_stale_instance_transfer_is_reported() -> None:
    result = transfers_reach_new_instance(_replacement("i1").ops())
    assert result.valid is False
    assert "'i1'" in result.explanation and "'i2'" in result.explanation
    assert [op.f for op in result.ops] == ["heal", "heal", "write", "write"]


def test_final_reads_of_the_new_instance_judge_writes_since_the_replacement() -> None:
    seen = (_replacement("i2").call(2, "read", "A/1", 10, 11, result="y", final=True)
            .call(2, "read", "A/0", 12, 13, result=None, final=True))
    assert transfers_reach_new_instance(seen.ops()).valid is True  # A/0 was written before
    missing = _replacement("i2").call(2, "read", "A/1", 10, 11, result=None, final=True)
    result = transfers_reach_new_instance(missing.ops())
    assert result.valid is False
    assert "missed writes" in result.explanation and "A/1='y'" in result.explanation
    assert {op.f for op in result.ops} == {"write", "read"}


def test_remote_reads_are_judged_per_incarnation() -> None:
    base = (Build().call(0, "write", "A/0", 0, 1, arg="x")
            .call(1, "read", "A/0", 1.5, 1.8, result="x")
            .call(NEMESIS, "inject", "A", 2, 3, type="info")
            .call(1, "read", "A/0", 2.5, 3.5, result=None)      # overlaps the kill: not judged
            .call(NEMESIS, "heal", "A", 3, 4, type="info", instance="i2")
            .call(1, "read", "A/0", 4.5, 4.8, result=None)      # new memory: x is gone, fine
            .call(0, "write", "A/0", 5, 6, arg="y"))
    assert transfers_reach_new_instance(base.ops()).valid is True
    stale = base.call(1, "read", "A/0", 7, 8, result=None)
    result = transfers_reach_new_instance(stale.ops())
    assert result.valid is False and "A/0='y'" in result.explanation


# ------------------------------------------------------------------ recovery


def test_bounded_recovery() -> None:
    h = (Build().call(NEMESIS, "inject", "srv", 0, 1, type="info")
         .call(0, "get", "k", 1, 2, type="fail")
         .call(NEMESIS, "heal", "srv", 10, 11, type="info")
         .call(0, "get", "k", 500, 600))
    assert bounded_recovery(1.0)(h.ops()).valid is True
    result = bounded_recovery(0.2)(h.ops())
    assert result.valid is False and "0.589s later" in result.explanation


def test_final_reads_do_not_count_as_recovery() -> None:
    h = (Build().call(NEMESIS, "inject", "srv", 0, 1, type="info")
         .call(NEMESIS, "heal", "srv", 10, 11, type="info")
         .call(0, "get", "k", 20, 30, type="fail")
         .call(0, "get", "k", 2000, 2100, type="fail")
         .get(1, "k", None, 2200, 2201, final=True))
    result = bounded_recovery(1.0)(h.ops())
    assert result.valid is False, "a final read after the run is not the system recovering"


def test_a_history_that_ends_before_the_bound_cannot_judge_the_last_heal() -> None:
    h = (Build().call(NEMESIS, "inject", "srv", 0, 1, type="info")
         .call(NEMESIS, "heal", "srv", 10, 11, type="info")
         .call(0, "get", "k", 20, 30, type="fail"))
    assert bounded_recovery(1.0)(h.ops()).valid is None


# ------------------------------------------------------------------ composition and export


def test_verdict_composes_and_asserts() -> None:
    h = Build().put(0, "k", "a", 0, 1).get(0, "k", None, 10, 11, final=True)
    verdict = check(h.ops(), no_lost_acks, no_phantom_reads)
    assert verdict.valid is False
    assert verdict["no-phantom-reads"].valid is None  # it saw no value: judged nothing
    with pytest.raises(AssertionError, match="no-lost-acks: INVALID"):
        verdict.assert_valid()


def test_recorded_history_round_trips_through_jsonl(tmp_path) -> None:
    history = History()
    inv = history.invoke(0, "put", key="k", value="a")
    history.ok(inv, instance="i1")
    crash = history.invoke(1, "put", key="k", value="b")
    history.info(crash, error="timeout")
    final = history.invoke(2, "get", key="k", final=True)
    history.ok(final, value="a")
    path = tmp_path / "h.jsonl"
    history.to_jsonl(path)
    first = json.loads(path.read_text().splitlines()[0])
    assert {"index", "type", "f", "process", "time", "value"} <= set(first)
    again = History.from_jsonl(path)
    assert again.ops == history.ops
    assert [c.type for c in again.calls()] == ["ok", "info", "ok"]
    assert check(again, no_lost_acks, no_phantom_reads).valid is True
    porcupine = history.to_porcupine()
    assert porcupine[1]["Return"] is None and porcupine[0]["Return"] is not None


def test_history_rejects_a_second_invoke_of_a_busy_process() -> None:
    history = History()
    history.invoke(0, "get", key="k")
    with pytest.raises(RuntimeError, match="pending"):
        history.invoke(0, "get", key="k")


def test_malformed_history_line_names_line_and_field(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"index": 0, "type": "invoke", "f": "get", "process": 0, "time": 1}\n'
                    '{"index": 1, "type": "done", "f": "get", "process": 0, "time": 2}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: field 'type'"):
        History.from_jsonl(path)


# ------------------------------------------------------------------ against a brute force

def _naive_stale(ops: list[Op]) -> bool:
    """The definition, directly: some ok read misses a put acknowledged before it began, and
    no write producing what it saw could lie between them."""
    calls = pair(ops)
    writes = [c for c in calls if c.f in ("put", "remove") and not c.failed]
    values = {(c.key, c.argument) for c in writes if c.f == "put"}
    for r in calls:
        if r.f != "get" or not r.ok:
            continue
        v = r.result
        if v is not None and (r.key, v) not in values:
            continue
        for p in writes:
            if p.key != r.key or p.f != "put" or not p.ok or not p.end < r.start or p.argument == v:
                continue
            producers = [w for w in writes if w.key == r.key and
                         (w.f == "remove" if v is None else w.f == "put" and w.argument == v)]
            if not any(w.end > p.start and w.start < r.end for w in producers):
                return True
    return False


CALL = st.tuples(st.sampled_from(["put", "get", "remove"]), st.sampled_from(["a", "b"]),
                 st.integers(0, 40), st.integers(1, 10), st.sampled_from(["ok", "ok", "fail", "info"]),
                 st.sampled_from([None, "v0", "v1", "v2", "v3"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(CALL, max_size=12))
def test_stale_read_check_matches_its_definition(spec) -> None:
    b = Build()
    for i, (f, key, start, length, type_, seen) in enumerate(spec):
        if f == "get":
            b.call(i, f, key, start, start + length, "ok" if type_ == "info" else type_,
                   result=seen)
        else:
            b.call(i, f, key, start, start + length, type_, arg=f"v{i % 4}" if f == "put" else None)
    ops = b.ops()
    assert (no_stale_reads(ops).valid is False) == _naive_stale(ops)
