"""mc_etcd: a real etcd per worker that serves, survives stop/start, and leaves nothing behind."""

import json
import os
import re

import pytest

from pytest_mooncake.runtime.etcd_process import etcd_healthy


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _running(path: str) -> list[int]:
    """Pids of live processes whose command line names ``path`` (a shell running a script)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if path.encode() in argv:
            found.append(int(entry))
    return found


def test_put_get_and_restart_keeps_data(mc_etcd) -> None:
    client = mc_etcd.client()
    client.put("mooncake/ram/seg-a", b'{"name":"seg-a"}')
    assert client.get("mooncake/ram/seg-a")[0] == b'{"name":"seg-a"}'
    endpoints = list(mc_etcd.endpoints)
    mc_etcd.stop()
    assert not mc_etcd.alive()
    assert not etcd_healthy(endpoints[0])
    mc_etcd.start()
    assert mc_etcd.endpoints == endpoints
    assert mc_etcd.client().get("mooncake/ram/seg-a")[0] == b'{"name":"seg-a"}'


def test_uri_is_mooncake_spelling(mc_etcd) -> None:
    assert mc_etcd.uri == "etcd://" + mc_etcd.endpoints[0]
    assert mc_etcd.endpoints[0].startswith("127.0.0.1:")


def test_no_etcd_process_survives_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_a(mc_etcd):
            print("ETCDPID", mc_etcd.process.pid)
            mc_etcd.client().put("k", "v")
        def test_b(mc_etcd):
            assert mc_etcd.client().get("k")[0] == b"v"
    """)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=2)
    pid = int(next(ln for ln in result.outlines if "ETCDPID" in ln).split("ETCDPID")[1].split()[0])
    assert not _pid_alive(pid), f"etcd pid {pid} outlived its session"


def test_two_xdist_workers_get_independent_etcds(pytester: pytest.Pytester) -> None:
    out = pytester.path / "records"
    out.mkdir()
    # Each test puts a key under its worker's prefix and records what it sees; xdist's load
    # scheduling hands all 4 tests out at once, 2 consecutive ones to each of the 2 workers.
    pytester.makepyfile(f"""
        import json, pathlib
        import pytest
        @pytest.mark.parametrize("i", range(4))
        def test_a(mc_etcd, i, worker_id):
            client = mc_etcd.client()
            client.put(f"workers/{{worker_id}}/{{i}}", "1")
            keys = sorted(m.key.decode() for _, m in client.get_prefix("workers/"))
            record = dict(worker=worker_id, endpoints=mc_etcd.endpoints,
                          pid=mc_etcd.process.pid, keys=keys)
            pathlib.Path({str(out)!r}, f"{{i}}.json").write_text(json.dumps(record))
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=4)
    records = [json.loads(f.read_text()) for f in sorted(out.glob("*.json"))]
    assert len(records) == 4, f"expected 4 records, got {len(records)}"
    by_worker: dict[str, list[dict]] = {}
    for rec in records:
        by_worker.setdefault(rec["worker"], []).append(rec)
    assert sorted(by_worker) == ["gw0", "gw1"], f"tests ran on {sorted(by_worker)}, not 2 workers"
    etcd_of = {}
    for worker, recs in by_worker.items():
        assert len({(tuple(r["endpoints"]), r["pid"]) for r in recs}) == 1, (
            f"{worker} saw more than one etcd within its session: {recs}")
        etcd_of[worker] = (tuple(recs[0]["endpoints"]), recs[0]["pid"])
        for rec in recs:
            foreign = [k for k in rec["keys"] if not k.startswith(f"workers/{worker}/")]
            assert not foreign, f"{worker}'s etcd holds the other worker's keys {foreign}"
    (ep0, pid0), (ep1, pid1) = etcd_of["gw0"], etcd_of["gw1"]
    assert ep0 != ep1, f"both workers used etcd at {ep0}"
    assert pid0 != pid1, f"both workers used etcd pid {pid0}"
    alive = [pid for pid in (pid0, pid1) if _pid_alive(pid)]
    assert not alive, f"etcd pid(s) {alive} outlived their worker's session"


def test_external_etcd_is_used_and_not_stopped(pytester: pytest.Pytester, mc_etcd) -> None:
    pytester.makepyfile("""
        import pytest
        def test_a(mc_etcd):
            assert not mc_etcd.owned
            mc_etcd.client().put("from-inner", "1")
            with pytest.raises(Exception, match="not ours to stop"):
                mc_etcd.stop()
    """)
    result = pytester.runpytest_subprocess(f"--mc-etcd={mc_etcd.endpoints[0]}")
    result.assert_outcomes(passed=1)
    assert mc_etcd.client().get("from-inner")[0] == b"1"
    assert mc_etcd.alive()


def test_unreachable_external_etcd_is_a_clear_error(pytester: pytest.Pytester) -> None:
    from pytest_mooncake.runtime.ports import free_port

    pytester.makepyfile("def test_a(mc_etcd):\n    pass\n")
    port = free_port()
    result = pytester.runpytest_subprocess(f"--mc-etcd=127.0.0.1:{port}")
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*--mc-etcd=127.0.0.1:{port}: no endpoint answers GET /health*"])


def test_missing_etcd_binary_says_what_to_install(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(mc_etcd):\n    pass\n")
    env_before = os.environ.get("MC_ETCD_BIN")
    os.environ["MC_ETCD_BIN"] = str(pytester.path / "no-such-etcd")
    try:
        result = pytester.runpytest_subprocess()
    finally:
        if env_before is None:
            del os.environ["MC_ETCD_BIN"]
        else:
            os.environ["MC_ETCD_BIN"] = env_before
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*no-such-etcd is not an executable file*apt-get install -y etcd-server*"])


def test_find_etcd_without_any_binary(monkeypatch) -> None:
    from pytest_mooncake.runtime import etcd_process as etcd

    monkeypatch.delenv("MC_ETCD_BIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(etcd, "FALLBACK_PATHS", ())
    with pytest.raises(etcd.EtcdUnavailable, match="apt-get install -y etcd-server"):
        etcd.find_etcd()


HANGING_ETCD = """#!/bin/bash
echo "fake etcd $$: alive, never serving"
echo $$ > "$0.pid"
exec -a "$0" sleep 600
"""
EXITING_ETCD = """#!/bin/sh
echo "fake etcd $$: refusing to start"
echo $$ > "$0.pid"
exit 3
"""


@pytest.mark.parametrize(("script", "what"), [
    (HANGING_ETCD, "GET http://127.0.0.1:*/health did not report healthy within 1s (killed it; "
                   "raise MC_ETCD_READY_TIMEOUT*"),
    (EXITING_ETCD, "it exited with 3 before GET http://127.0.0.1:*/health reported healthy"),
], ids=["never-serves", "exits-at-once"])
def test_etcd_that_never_becomes_healthy_is_a_one_line_setup_error(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, script: str, what: str) -> None:
    fake = pytester.path / "fake-etcd"
    fake.write_text(script)
    fake.chmod(0o755)
    monkeypatch.setenv("MC_ETCD_BIN", str(fake))
    monkeypatch.setenv("MC_ETCD_READY_TIMEOUT", "1")
    pytester.makepyfile("""
        def test_a(mc_etcd):
            pass
        def test_b(mc_etcd):
            pass
    """)
    # The bound: the whole run must end well within this, or pytester raises.
    result = pytester.runpytest_subprocess(timeout=60)
    result.assert_outcomes(errors=2)
    text = result.stdout.str()
    assert "Traceback" not in text and "During handling" not in text, text
    lines = result.outlines
    heading = next(i for i, ln in enumerate(lines) if re.search(r"ERROR at setup of test_a\b", ln))
    message, after = lines[heading + 1], lines[heading + 2]
    assert re.fullmatch(r"-+ Captured etcd log -+", after), (
        f"setup error is not one line; it continues with {after!r}")
    result.stdout.fnmatch_lines([f"etcd ({fake}) did not become healthy: {what}; see the etcd log*"])
    for hint in ("MC_ETCD_BIN", "apt-get install -y etcd-server", "--mc-etcd=HOST:PORT"):
        assert hint in message, f"setup error does not say what to do ({hint}): {message}"
    assert lines[heading + 3].startswith("--- start #1: "), "the etcd log shown is not the fake's"
    # Under load the 1 s bound can end the script before it wrote its pid file, so look for any
    # process still running it (the hanging one keeps the script's path as its argv[0]).
    assert not _running(str(fake)), f"the fake etcd outlived the session: {_running(str(fake))}"
    pid_file = pytester.path / "fake-etcd.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        assert not _pid_alive(pid), f"fake etcd pid {pid} outlived the session"


def test_bad_ready_timeout_is_a_clear_error(pytester: pytest.Pytester,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MC_ETCD_READY_TIMEOUT", "soon")
    pytester.makepyfile("def test_a(mc_etcd):\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*MC_ETCD_READY_TIMEOUT must be a positive number of seconds "
                                 "(got 'soon')*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_failing_test_shows_the_etcd_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_uses_etcd_and_fails(mc_etcd):
            mc_etcd.client().put("k", "v")
            assert False, "boom"
        def test_uses_etcd_and_passes(mc_etcd):
            pass
        def test_fails_without_etcd():
            assert False, "bang"
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=2)
    text = result.stdout.str()
    failures = re.split(r"\n_{3,} (test_\w+) _{3,}\n", text)
    sections = dict(zip(failures[1::2], failures[2::2], strict=True))
    assert set(sections) == {"test_uses_etcd_and_fails", "test_fails_without_etcd"}, sorted(sections)
    with_etcd = sections["test_uses_etcd_and_fails"]
    assert re.search(r"-+ Captured etcd log -+", with_etcd), "failing test shows no etcd log"
    # The log itself: the supervisor's start line with the real etcd's argv.
    assert re.search(r"--- start #1: \S*etcd --name mc-etcd-\d+ ", with_etcd), with_etcd
    assert "Captured etcd log" not in sections["test_fails_without_etcd"], (
        "a test that did not use mc_etcd shows its log")


def _connections_to(port: int) -> int:
    """Established TCP connections this process holds to 127.0.0.1:``port`` (from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):  # gRPC dials v4-mapped IPv6
        with open(table_path) as table:
            for row in list(table)[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


def test_each_client_has_a_connection_of_its_own(mc_etcd) -> None:
    """gRPC would share one socket per address; after an etcd restart a new client then inherits
    the old client's dead socket ("sendmsg: Broken pipe"). Each client must dial its own."""
    port = int(mc_etcd.endpoints[0].rpartition(":")[2])
    before = _connections_to(port)
    first, second = mc_etcd.client(), mc_etcd.client()
    first.get("k")
    second.get("k")
    assert _connections_to(port) - before == 2
    first.close()
    second.close()
