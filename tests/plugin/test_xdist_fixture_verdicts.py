"""``pytest -n 2`` gives the same verdicts as a serial run on tests that use the real fixtures
(FW-5): a small suite whose tests start engines on the worker's etcd, plant values, cut a
proxy of the fault server and draw from the seeded RNG runs serially and on two xdist workers
with the same ``--mc-seed``; both JSON reports must agree on every verdict and every test's
outcome, and neither run may leave a process behind (FW-8)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

SUITE = """
import pytest
from pytest_mooncake.planting import buffer_names, plant, published, with_probe_buffer
from pytest_mooncake.waits import holds_for, wait_until


@pytest.mark.mc_req("MR-1", "MR-3")
def test_new_value_is_fetched_after_the_ttl(mc_engine, mc_metadata):
    a = mc_engine("seg-a")
    b = mc_engine("seg-b", ttl_ms=100)
    assert b.lookup("seg-a").ok
    plant(mc_metadata, "seg-a", with_probe_buffer(published(mc_metadata, "seg-a"), "probe"))
    wait_until(lambda: "probe" in buffer_names(b.lookup("seg-a").descriptor), 10, "the refresh")


@pytest.mark.mc_req("MR-4")
def test_cut_metadata_network_keeps_the_snapshot(mc_engine, mc_metadata, mc_faults):
    proxy, address = mc_faults.proxy("metadata", mc_metadata.address)
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=mc_metadata.through(address), ttl_ms=100)
    first = b.lookup("seg-a")
    assert first.ok, first.error
    proxy.disable()
    holds_for(lambda: b.lookup("seg-a").ok, 0.3, "lookups served from the cache")
    proxy.enable()
    assert b.write("seg-a", 0, b"after-the-cut").ok


@pytest.mark.mc_req("MR-5")
def test_forced_refresh_on_a_cut_network_fails(mc_engine, mc_metadata, mc_faults):
    proxy, address = mc_faults.proxy("metadata", mc_metadata.address)
    mc_engine("seg-a")
    b = mc_engine("seg-b", metadata=mc_metadata.through(address), ttl_ms=600000)
    assert b.lookup("seg-a").ok
    proxy.disable()
    assert not b.lookup("seg-a", force=True).ok


@pytest.mark.mc_req("MR-18")
def test_deliberately_wrong_expectation(mc_engine, mc_etcd):
    mc_etcd.client().put("xdist-probe", "1")
    a = mc_engine("seg-a")
    assert a.descriptor()["name"] == "not-seg-a", "a FAIL verdict both runs must agree on"


@pytest.mark.mc_req("MR-7")
@pytest.mark.parametrize("i", range(6))
def test_seeded_choice(mc_rng, i):
    assert mc_rng.random() < 0.5, "depends only on the session seed and the test id"


@pytest.mark.mc_req("CO-3")
@pytest.mark.mc_requires("version_skew")
def test_not_applicable():
    pass
"""

PROBE = "MC_XDIST_LEAK_PROBE"


def _survivors(token: str) -> list[str]:
    """Live processes (not zombies) whose environment carries ``PROBE=token``: started,
    directly or not, by the inner run."""
    out = []
    needle = f"{PROBE}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(f"pid {entry.name}: {cmdline.strip()}")
    return out


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, report: str,
         *extra: str) -> tuple[dict, pytest.RunResult]:
    token = uuid.uuid4().hex
    monkeypatch.setenv(PROBE, token)
    # One run decides (--mc-confirm=0): the verdicts of one run on one and on two workers are
    # what must agree; re-runs under xdist: test_intermittent_verdicts.py.
    result = pytester.runpytest_subprocess("--mc-seed=7", f"--mc-report={report}",
                                           "--mc-confirm=0", "-p", "xdist", "-v", *extra,
                                           timeout=120)
    left = _survivors(token)
    assert not left, f"the {report} run left processes behind:\n" + "\n".join(left)
    return json.loads((pytester.path / report).read_text()), result


def _outcomes(doc: dict) -> dict[str, str]:
    return {t["nodeid"]: t["outcome"] for req in doc["requirements"].values()
            for t in req["tests"]}


def _verdicts(doc: dict) -> dict[str, str]:
    return {req: entry["verdict"] for req, entry in doc["requirements"].items()}


def test_fixture_suite_gives_the_same_verdicts_on_two_workers(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_fixture_suite=SUITE)
    serial, _ = _run(pytester, monkeypatch, "serial.json")
    par, result = _run(pytester, monkeypatch, "par.json", "-n", "2")
    workers = {w for w in ("gw0", "gw1") if any(f"[{w}]" in line for line in result.outlines)}
    assert workers == {"gw0", "gw1"}, "the -n 2 run did not use two workers"

    verdicts = _verdicts(serial)
    assert {"pass", "FAIL", "n/a"} <= set(verdicts.values()), (
        f"the suite should exercise pass, FAIL and n/a verdicts: {verdicts}")
    assert verdicts["MR-4"] == verdicts["MR-5"] == verdicts["MR-3"] == "pass", verdicts
    assert verdicts["MR-18"] == "FAIL", verdicts
    assert _verdicts(par) == verdicts
    assert _outcomes(par) == _outcomes(serial)
    assert len(_outcomes(serial)) == 11
    assert par["seed"] == serial["seed"] == 7
