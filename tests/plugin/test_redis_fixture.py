"""mc_redis: a real redis-server per worker that serves, survives stop/start, is reached through
the fault proxy like etcd, and leaves nothing behind."""

import os

import pytest

from pytest_mooncake.runtime.redis_process import find_redis, redis_answers


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_set_get_and_restart_on_the_same_port(mc_redis) -> None:
    client = mc_redis.client()
    client.set("mooncake/ram/seg-a", b'{"name":"seg-a"}')
    assert client.get("mooncake/ram/seg-a") == b'{"name":"seg-a"}'
    address = mc_redis.address
    mc_redis.stop()
    assert not mc_redis.alive()
    assert not redis_answers(address)
    mc_redis.start()
    assert mc_redis.address == address
    # persistence is off: a restarted Redis is an empty one (a Redis without a volume)
    assert mc_redis.client().get("mooncake/ram/seg-a") is None


def test_uri_is_mooncake_spelling(mc_redis) -> None:
    assert mc_redis.uri == "redis://" + mc_redis.address
    assert mc_redis.address.startswith("127.0.0.1:")


def test_faults_through_the_proxy_as_for_etcd(mc_redis, mc_faults) -> None:
    """Partition (disable), reset, latency and blackhole on the path to Redis, as suites do for
    etcd: a client through the proxy sees each, the server itself stays fine."""
    import redis

    proxy, address = mc_faults.proxy("redis", mc_redis.address)
    from pytest_mooncake.runtime.redis_process import redis_client

    through = redis_client(address, timeout=1.0)
    assert through.ping()
    proxy.disable()
    with pytest.raises(redis.ConnectionError):
        redis_client(address, timeout=1.0).ping()
    proxy.enable()
    assert redis_client(address, timeout=1.0).ping()
    proxy.add_toxic(type="timeout", attributes={"timeout": 0}, name="blackhole")
    with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
        redis_client(address, timeout=0.5).ping()
    proxy.destroy_toxic("blackhole")
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 0}, name="reset")
    with pytest.raises(redis.ConnectionError):
        redis_client(address, timeout=1.0).ping()
    proxy.destroy_toxic("reset")
    assert mc_redis.client().ping()


def test_no_redis_process_survives_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_a(mc_redis):
            print("REDISPID", mc_redis.process.pid)
            mc_redis.client().set("k", "v")
        def test_b(mc_redis):
            assert mc_redis.client().get("k") == b"v"
    """)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=2)
    pid = int(next(ln for ln in result.outlines if "REDISPID" in ln).split("REDISPID")[1].split()[0])
    assert not _pid_alive(pid), f"redis-server pid {pid} outlived its session"


def test_two_xdist_workers_get_independent_servers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.parametrize("i", range(4))
        def test_a(mc_redis, i, worker_id):
            client = mc_redis.client()
            client.set(f"workers/{worker_id}/{i}", "1")
            foreign = [k for k in client.scan_iter("workers/*")
                       if not k.decode().startswith(f"workers/{worker_id}/")]
            assert not foreign, foreign
            print("SERVER", worker_id, mc_redis.address)
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=4)


def test_external_redis_is_used_and_not_stopped(pytester: pytest.Pytester, mc_redis) -> None:
    pytester.makepyfile("""
        import pytest
        def test_a(mc_redis):
            assert not mc_redis.owned
            mc_redis.client().set("from-inner", "1")
            with pytest.raises(Exception, match="not ours to stop"):
                mc_redis.stop()
    """)
    result = pytester.runpytest_subprocess(f"--mc-redis={mc_redis.address}")
    result.assert_outcomes(passed=1)
    assert mc_redis.client().get("from-inner") == b"1"
    assert mc_redis.alive()


def test_unreachable_external_redis_is_a_clear_error(pytester: pytest.Pytester) -> None:
    from pytest_mooncake.runtime.ports import free_port

    pytester.makepyfile("def test_a(mc_redis):\n    pass\n")
    port = free_port()
    result = pytester.runpytest_subprocess(f"--mc-redis=127.0.0.1:{port}")
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*--mc-redis=127.0.0.1:{port}: PING got no PONG*"])


def test_bad_redis_address_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess("--mc-redis=nohost")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--mc-redis takes host:port (got 'nohost')*"])


def test_missing_redis_binary_says_what_to_install(pytester: pytest.Pytester,
                                                   monkeypatch) -> None:
    pytester.makepyfile("def test_a(mc_redis):\n    pass\n")
    monkeypatch.setenv("MC_REDIS_BIN", str(pytester.path / "no-such-redis"))
    result = pytester.runpytest_subprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*no-such-redis is not an executable file*"
                                 "apt-get install -y redis-server*"])


def test_a_redis_that_exits_at_once_fails_its_tests_with_the_log(pytester: pytest.Pytester,
                                                                  monkeypatch) -> None:
    fake = pytester.path / "bad-redis"
    fake.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR (stand-in)'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MC_REDIS_BIN", str(fake))
    pytester.makepyfile("def test_a(mc_redis):\n    pass\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*redis-server*did not become ready: it exited with 1*"])


def test_find_redis_names_the_debian_package(monkeypatch) -> None:
    monkeypatch.delenv("MC_REDIS_BIN", raising=False)
    assert os.access(find_redis(), os.X_OK)
