"""The verdict rule (docs/explanation/verdict-rule.md), end to end through pytester: n/a only for a
means the target lacks (``mc_requires``, or a ``TargetLacks`` from a live probe); a missing
interface a requirement demands (``mc_demands``) is FAIL; a broken observation (refused
connection, 5xx, an answer of the wrong shape) is FAIL with what was seen, never n/a.

The observations go through the Mooncake family's real admin reading (``MooncakeMasters``)
against a small HTTP server that answers like a master without a promotability endpoint, like a
crashed one (500), or with garbage, and a port nothing listens on."""

from __future__ import annotations

import json

import pytest

CONFTEST = '''
import http.server
import threading

import pytest

from pytest_mooncake.runtime.ports import free_port
from pytest_mooncake.targets.mooncake.master_cluster.admin_view import MooncakeMasters

ANSWERS = {
    "missing": {},                                   # every path 404, /health 200
    "crashed": {"/ha/promotable": (500, "internal error")},
    "garbage": {"/ha/promotable": (200, "<html>not json</html>")},
    "honest": {"/ha/promotable": (200, '{"promotable": false, "reason": "behind"}')},
}


class Admin(http.server.BaseHTTPRequestHandler):
    answers = {}

    def do_GET(self):
        status, body = self.answers.get(self.path, (404, "not found"))
        if self.path == "/health":
            status, body = 200, '{"role": "standby", "ha_state": "standby"}'
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class FakeMasters(MooncakeMasters):
    build = "fake-mooncake 9.9"
    where = "a fake cluster"
    etcd = []

    def __init__(self, url):
        self.url = url
        self.drain_jobs = {}

    def admin_url(self, index):
        return self.url

    def observed(self):
        return [0]


@pytest.fixture
def masters(request):
    kind = request.param
    if kind == "refused":
        yield FakeMasters(f"http://127.0.0.1:{free_port()}")
        return
    handler = type("Handler", (Admin,), {"answers": ANSWERS[kind]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield FakeMasters(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
'''

SUITE = '''
import pytest

def ask(masters):
    return masters.promotable(0)

@pytest.mark.mc_req("MP-3")
@pytest.mark.mc_demands("promotability")
@pytest.mark.parametrize("masters", ["missing"], indirect=True)
def test_demanded_and_missing(masters):
    ask(masters)

@pytest.mark.mc_req("MP-4")
@pytest.mark.mc_requires("promotability")
@pytest.mark.parametrize("masters", ["missing"], indirect=True)
def test_a_means_and_missing(masters):
    ask(masters)

@pytest.mark.mc_req("MP-5")
@pytest.mark.parametrize("masters", ["refused"], indirect=True)
def test_refused(masters):
    ask(masters)

@pytest.mark.mc_req("MP-6")
@pytest.mark.parametrize("masters", ["crashed"], indirect=True)
def test_crashed(masters):
    ask(masters)

@pytest.mark.mc_req("MP-1")
@pytest.mark.parametrize("masters", ["garbage"], indirect=True)
def test_garbage(masters):
    ask(masters)

@pytest.mark.mc_req("MP-2")
@pytest.mark.parametrize("masters", ["honest"], indirect=True)
def test_honest(masters):
    assert ask(masters)["promotable"] is False

@pytest.mark.mc_req("MR-15")
@pytest.mark.mc_demands("version_skew")
def test_demanded_and_not_in_the_targets_capabilities():
    pass

@pytest.mark.mc_req("MR-17")
@pytest.mark.mc_requires("version_skew")
def test_required_and_not_in_the_targets_capabilities():
    pass
'''


def only_test(report: dict, req: str) -> dict:
    (test,) = report[req]["tests"]
    return test


def test_na_only_for_a_missing_means_fail_for_a_demanded_interface_or_a_broken_observation(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--mc-seed=5", "--mc-report=report.json")
    result.assert_outcomes(passed=1, failed=5, skipped=2)
    report = json.loads((pytester.path / "report.json").read_text())["requirements"]

    # a missing interface a requirement demands: FAIL naming what the probe saw
    assert report["MP-3"]["verdict"] == "FAIL"
    message = only_test(report, "MP-3")["message"]
    assert "MP-3 demands promotability" in message
    assert "exposes no promotability predicate" in message
    assert "GET /ha/promotable -> 404" in message and "fake-mooncake 9.9" in message
    # the same missing endpoint as a means of a sub-check: n/a with the probe's answer
    assert report["MP-4"]["verdict"] == "n/a"
    test = only_test(report, "MP-4")
    assert test["capability"] == "promotability"
    assert "GET /ha/promotable -> 404" in test["reason"]
    # broken observations: FAIL with what was seen, never n/a
    assert report["MP-5"]["verdict"] == "FAIL"
    message = only_test(report, "MP-5")["message"]
    assert "ObservationFailed" in message and "no answer" in message
    assert report["MP-6"]["verdict"] == "FAIL"
    assert "HTTP 500" in only_test(report, "MP-6")["message"]
    assert report["MP-1"]["verdict"] == "FAIL"
    message = only_test(report, "MP-1")["message"]
    assert "without the field 'promotable'" in message and "not json" in message
    # an honest answer is judged
    assert report["MP-2"]["verdict"] == "pass"
    # demands and requires against the target's probed capabilities (set up before the call)
    assert report["MR-15"]["verdict"] == "FAIL"
    assert "MR-15 demands version_skew" in only_test(report, "MR-15")["message"]
    assert report["MR-17"]["verdict"] == "n/a"


def test_unknown_capability_in_mc_demands_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile('''
        import pytest

        @pytest.mark.mc_req("MP-3")
        @pytest.mark.mc_demands("promotability_predicate")
        def test_x():
            pass
    ''')
    result = pytester.runpytest()
    result.stderr.fnmatch_lines(["*unknown capability 'promotability_predicate' in mc_demands*"])
