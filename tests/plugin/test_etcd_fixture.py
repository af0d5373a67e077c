"""mc_etcd: a real etcd per worker that serves, survives stop/start, and leaves nothing behind."""

import os

import pytest

from pytest_mooncake.etcd import etcd_healthy


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
    pytester.makepyfile("""
        import pytest
        @pytest.mark.parametrize("i", range(4))
        def test_a(mc_etcd, i, worker_id):
            print("ETCD", worker_id, mc_etcd.endpoints[0], mc_etcd.process.pid)
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-s", "-p", "xdist")
    result.assert_outcomes(passed=4)


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
    from pytest_mooncake.ports import free_port

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
    from pytest_mooncake import etcd

    monkeypatch.delenv("MC_ETCD_BIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(etcd, "FALLBACK_PATHS", ())
    with pytest.raises(etcd.EtcdUnavailable, match="apt-get install -y etcd-server"):
        etcd.find_etcd()
