"""--mc-compute-slots: with more xdist workers than slots, at most N computing tests (those that
need the controlled scheduler) run at once; the others fill the remaining workers."""

from __future__ import annotations

import pytest

from pytest_mooncake.config import compute_slots
from pytest_mooncake.config.compute_slots import acquire, parse, pick, slots_for

# Each computing test marks itself live in a shared directory, then waits (bounded) to see
# another computing test live beside it: under a limit of one it never does; without the limit
# four workers start several at once and the first to look sees another.
TESTS = """
import os, time
from pathlib import Path
import pytest

SHARED = Path(os.environ["MC_SLOTS_TEST_DIR"])


def others_live(me):
    return [p.name for p in SHARED.glob("live-*") if p.name != me]


@pytest.mark.mc_requires("scheduler")
@pytest.mark.parametrize("n", range(4))
def test_computes(n):
    me = f"live-{n}"
    (SHARED / me).touch()
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end and not others_live(me):
            time.sleep(0.02)
        seen = others_live(me)
        (SHARED / f"seen-{n}").write_text(",".join(seen))
        assert not seen, f"computing beside {seen}"
    finally:
        (SHARED / me).unlink()


@pytest.mark.parametrize("n", range(6))
def test_waits(n):
    (SHARED / f"waited-{n}").touch()
"""


def run(pytester: pytest.Pytester, monkeypatch, *args: str):
    shared = pytester.path / "shared"
    shared.mkdir(exist_ok=True)
    monkeypatch.setenv("MC_SLOTS_TEST_DIR", str(shared))
    pytester.makepyfile(test_slots=TESTS)
    return pytester.runpytest_subprocess("-n", "4", "-p", "no:cacheprovider", *args), shared


def test_one_slot_never_runs_two_computing_tests_at_once(pytester, monkeypatch) -> None:
    result, shared = run(pytester, monkeypatch, "--mc-compute-slots=1")
    result.assert_outcomes(passed=10)
    assert sorted(p.name for p in shared.glob("seen-*")) == [f"seen-{n}" for n in range(4)]
    assert len(list(shared.glob("waited-*"))) == 6
    assert not list(shared.glob("live-*"))


def test_without_the_limit_four_workers_run_them_side_by_side(pytester, monkeypatch) -> None:
    """The control: the same tests at -n 4 with no limit do overlap (so the test above can
    fail)."""
    result, shared = run(pytester, monkeypatch, "--mc-compute-slots=off")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2, result.stdout.str()[-2000:]
    assert any("computing beside" in line for line in result.outlines)


def test_auto_limits_only_when_workers_outnumber_cores() -> None:
    assert slots_for("auto", 4, 2) == 2
    assert slots_for("auto", 2, 2) == 0
    assert slots_for("auto", 0, 2) == 0
    assert slots_for("off", 8, 2) == 0
    assert slots_for("3", 2, 2) == 3
    assert slots_for("3", 0, 2) == 0


def test_a_bad_value_is_a_usage_error_naming_it() -> None:
    assert parse(" AUTO ") == "auto" and parse("2") == "2" and parse("") == "auto"
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(pytest.UsageError, match=f"--mc-compute-slots must be auto, off or "
                                                    f"a positive number of tests \\(got '{bad}'\\)"):
            parse(bad)


def test_the_option_reaches_the_config(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--mc-compute-slots=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--mc-compute-slots must be auto, off or a positive*'nope'*"])


def test_pick_sends_a_computing_test_only_to_a_free_slot_and_a_worker_holding_none() -> None:
    computing = {0, 1, 2}
    # two slots, none in flight, an idle worker asking for two: one computing and the next
    # ordinary test (two computing tests on one worker would run one after the other)
    assert pick([0, 1, 2, 3, 4], 2, computing, 0, 2, False, 0) == [0, 3]
    # one slot taken elsewhere: one more computing test may go
    assert pick([1, 2, 3, 4], 2, computing, 1, 2, False, 0) == [1, 3]
    # both slots taken: only ordinary tests
    assert pick([2, 3, 4], 2, computing, 2, 2, False, 0) == [3, 4]
    # the worker already holds a computing test: ordinary ones
    assert pick([2, 3], 1, computing, 1, 2, True, 1) == [3]


def test_pick_still_gives_a_worker_the_two_tests_xdist_needs_to_start() -> None:
    """Only computing tests left and the slots taken: the worker gets them anyway (it waits for
    a slot on its side), or an xdist worker holding one test would never start it."""
    assert pick([5, 6], 2, {5, 6}, 2, 2, False, 0) == [5, 6]
    assert pick([5, 6], 2, {5, 6}, 2, 2, False, 1) == [5]
    assert pick([5, 6], 2, {5, 6}, 2, 2, False, 2) == []


def test_a_worker_waits_for_a_slot_and_past_its_deadline_runs_with_a_warning(tmp_path) -> None:
    held = [acquire(tmp_path, 2), acquire(tmp_path, 2)]
    assert all(slot.fd is not None for slot in held)
    with pytest.warns(UserWarning, match="no free slot of 2 .* running the test without one"):
        late = acquire(tmp_path, 2, deadline_s=0)
    assert late.fd is None
    held[1].release()
    again = acquire(tmp_path, 2, deadline_s=0)
    assert again.fd is not None
    for slot in (held[0], again, late):
        slot.release()


def test_the_published_lists_name_the_computing_tests(tmp_path) -> None:
    compute_slots.publish(tmp_path, "gw0", ["a.py::x", "a.py::y"])
    compute_slots.publish(tmp_path, "gw1", ["a.py::x"])
    (tmp_path / f"broken{compute_slots.LIST_SUFFIX}").write_text("{")
    assert compute_slots.published(tmp_path) == {"a.py::x", "a.py::y"}
