"""mc_toxiproxy / mc_faults: proxies never outlive a test, the server never outlives the
session, and --mc-toxiproxy uses a given server instead of starting one."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.runtime.processes import log_matches
from pytest_mooncake.runtime.toxiproxy_process import api_request, toxiproxy_version

# under --dist loadgroup, one worker runs the module, so its module-scoped fixtures are built once
pytestmark = pytest.mark.xdist_group("toxiproxy/test_fixture")

SERVER = ["-m", "pytest_mooncake.toxiproxy", "--listen", "127.0.0.1:0"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_embedded_server_answers_with_the_session_seed(mc_toxiproxy, mc_config) -> None:
    assert mc_toxiproxy.owned and mc_toxiproxy.url.startswith("http://127.0.0.1:")
    assert toxiproxy_version(mc_toxiproxy.url)
    assert f"seed={mc_config.seed} " in mc_toxiproxy.log_text()


def test_failing_test_leaves_no_proxy_and_session_leaves_no_server(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import socket
        import pytest

        @pytest.fixture(scope="module")
        def upstream():
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
            yield "127.0.0.1:%d" % s.getsockname()[1]
            s.close()

        def test_1_fails_with_proxies(mc_faults, mc_toxiproxy, upstream):
            print("SERVERPID", mc_toxiproxy.process.pid)
            proxy, addr = mc_faults.proxy("doomed", upstream)
            proxy.add_toxic(type="latency", attributes={"latency": 10})
            mc_faults.client().create(upstream=upstream, name="made_by_client")
            print("LISTEN", addr)
            assert False, "this test fails on purpose"

        def test_2_sees_a_clean_server(mc_faults):
            assert mc_faults.client().proxies() == {}
    """)
    result = pytester.runpytest_subprocess("-s", "-rA", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["PASSED *::test_2_sees_a_clean_server*",
                                 "FAILED *::test_1_fails_with_proxies*"])
    out = result.stdout.str()
    assert "toxiproxy log" in out, "a failing test shows the server's log"
    pid = int(re.search(r"SERVERPID (\d+)", out).group(1))
    assert not _pid_alive(pid), f"toxiproxy server pid {pid} outlived its session"


def test_given_url_is_used_and_left_running(pytester: pytest.Pytester, mc_processes) -> None:
    server = mc_processes.start("external-toxiproxy", [sys.executable, *SERVER],
                                ready=log_matches(r"ready: url=http://127\.0\.0\.1:\d+"),
                                ready_timeout=20)
    url = re.search(r"url=(\S+)", server.log_text()).group(1)
    pytester.makepyfile(f"""
        def test_uses_it(mc_faults, mc_toxiproxy):
            assert mc_toxiproxy.owned is False
            assert mc_faults.url == {url!r}
            proxy, addr = mc_faults.proxy("ext", "127.0.0.1:9")
            assert addr.startswith("127.0.0.1:")
    """)
    result = pytester.runpytest_subprocess(f"--mc-toxiproxy={url}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert server.alive(), "a --mc-toxiproxy server is not ours to stop"
    assert toxiproxy_version(url)
    assert api_request(url, "GET", "/proxies") == (200, {}), "its proxies were removed"


def test_unreachable_url_is_a_clear_error(pytester: pytest.Pytester) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    pytester.makepyfile("""
        def test_x(mc_faults):
            pass
    """)
    result = pytester.runpytest_subprocess(f"--mc-toxiproxy={url}", "-p", "no:cacheprovider")
    assert result.ret == 4
    said = result.stdout.str() + result.stderr.str()
    assert f"--mc-toxiproxy={url}: no answer to GET /version" in said, said


def test_xdist_workers_get_their_own_servers(pytester: pytest.Pytester) -> None:
    seen = pytester.path / "seen"
    seen.mkdir()
    pytester.makepyfile(f"""
        import pathlib, pytest
        @pytest.mark.parametrize("i", range(6))
        def test_a(mc_faults, mc_toxiproxy, i, worker_id):
            pathlib.Path({str(seen)!r}, worker_id).write_text(mc_toxiproxy.url)
            mc_faults.proxy("same-name", "127.0.0.1:9")
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    urls = {p.name: p.read_text() for p in seen.iterdir()}
    assert len(urls) == 2 and len(set(urls.values())) == 2, urls


def test_a_dead_embedded_server_is_reported_with_its_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_kill_it(mc_toxiproxy):
            mc_toxiproxy.process.kill()

        def test_after(mc_faults):
            pass
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the embedded Toxiproxy server exited*", "*mc-toxiproxy ready*"])


def test_fault_injections_are_allure_steps(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_faults(mc_faults):
            proxy, addr = mc_faults.proxy("meta", "127.0.0.1:9")
            proxy.add_toxic(type="latency", attributes={"latency": 5})
            with proxy.down():
                pass
            proxy.destroy_toxic("latency_downstream")
    """)
    results = pytester.path / "allure"
    result = pytester.runpytest_subprocess(f"--alluredir={results}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    steps = [step["name"] for path in results.glob("*-result.json")
             for step in json.loads(path.read_text()).get("steps", [])]
    assert steps == ["toxiproxy: proxy meta -> 127.0.0.1:9",
                     "toxiproxy meta: add toxic {'type': 'latency', 'attributes': {'latency': 5}}",
                     "toxiproxy meta: disable (connections refused)", "toxiproxy meta: enable",
                     "toxiproxy meta: remove toxic latency_downstream"], steps
