"""Malformed requests get a 4xx with a message naming what was wrong, never a 500 or a
traceback, and never change state."""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_mooncake.runtime.toxiproxy_process import api_request

UP = {"type": "latency", "stream": "upstream"}  # the victim already has latency_downstream
PROXY = {"name": "victim", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}


@pytest.fixture
def victim(mc_faults) -> dict:
    status, body = mc_faults.api("POST", "/proxies", PROXY)
    assert status == 201
    status, _ = mc_faults.api("POST", "/proxies/victim/toxics",
                              {"type": "latency", "attributes": {"latency": 1}})
    assert status == 200
    return body


CASES = [
    ("POST", "/proxies", [], "expected a JSON object"),
    ("POST", "/proxies", "x", "expected a JSON object"),
    ("POST", "/proxies", None, "bad request body"),
    ("POST", "/proxies", {"name": None, "upstream": "127.0.0.1:9"}, "'name'"),
    ("POST", "/proxies", {"name": "n", "upstream": "nohostport"}, "upstream must be host:port"),
    ("POST", "/proxies", {"name": "n", "upstream": "127.0.0.1:99999"}, "upstream must be"),
    ("POST", "/proxies", {"name": "n", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:x"},
     "listen must be host:port"),
    ("POST", "/proxies", {"name": "n", "upstream": "127.0.0.1:9", "enabled": "yes"},
     "'enabled'"),
    ("POST", "/proxies", {"name": "a/b", "upstream": "127.0.0.1:9"}, "must not contain '/'"),
    ("POST", "/proxies/victim", {"enabled": "no"}, "enabled must be true or false"),
    ("POST", "/proxies/victim", {"listen": 5}, "must be strings"),
    ("POST", "/proxies/victim", [], "expected a JSON object"),
    ("POST", "/proxies/victim/toxics", {"type": 5}, "'type' must be a string"),
    ("POST", "/proxies/victim/toxics", {"type": "latency", "stream": 5}, "'stream'"),
    ("POST", "/proxies/victim/toxics", {**UP, "attributes": []},
     "attributes must be a JSON object"),
    ("POST", "/proxies/victim/toxics", {**UP, "toxicity": "high"}, "toxicity"),
    ("POST", "/proxies/victim/toxics", {**UP, "attributes": {"latency": 1.5}},
     "'latency' must be an integer"),
    ("POST", "/proxies/victim/toxics", {**UP, "attributes": {"latency": True}},
     "'latency' must be an integer"),
    ("POST", "/proxies/victim/toxics", {**UP, "attributes": {"latency": 2**70}},
     "too large"),
    ("POST", "/proxies/victim/toxics/latency_downstream", {"attributes": {"jitter": -3}},
     "'jitter' must be >= 0"),
    ("POST", "/proxies/victim/toxics/latency_downstream", ["x"], "expected a JSON object"),
    ("POST", "/populate", {"name": "p"}, "expected a JSON array"),
    ("POST", "/populate", [5], "expected a JSON object at proxy 1"),
]


@pytest.mark.parametrize(("method", "path", "body", "words"), CASES,
                         ids=[f"{m} {p} {b!r}"[:60] for m, p, b, _ in CASES])
def test_malformed_request_is_4xx_with_message(mc_faults, victim, method, path, body,
                                               words) -> None:
    status, answer = mc_faults.api(method, path, body)
    assert 400 <= status < 500, answer
    assert isinstance(answer, dict) and answer["status"] == status, answer
    assert words in answer["error"], answer
    assert mc_faults.api("GET", "/proxies/victim") == (200, {**victim, "toxics": [
        {"attributes": {"latency": 1, "jitter": 0}, "name": "latency_downstream",
         "type": "latency", "stream": "downstream", "toxicity": 1}]}), "state unchanged"


def test_garbage_bytes_on_the_api_port(mc_faults) -> None:
    host, port = mc_faults.url.removeprefix("http://").rsplit(":", 1)
    for garbage in (b"\x00\xff\r\n\r\n", b"GET\r\n\r\n", b"POST /proxies HTTP/1.1\r\n"
                    b"Content-Length: nope\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(garbage)
            answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 4") or answer.startswith(b"HTTP/1.1 505"), answer
    assert api_request(mc_faults.url, "GET", "/version")[0] == 200


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "upstream", "listen", "enabled", "type", "stream", "toxicity",
                         "attributes", "latency", "rate", "bytes", "average_size", "x"]),
        inner, max_size=5),
    max_leaves=12)
ENDPOINTS = ["/proxies", "/populate", "/proxies/victim", "/proxies/victim/toxics",
             "/proxies/victim/toxics/latency_downstream"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(ENDPOINTS), body=JSON)
def test_any_json_never_gets_a_server_error(mc_faults, victim, path, body) -> None:
    status, answer = mc_faults.api("POST", path, body)
    assert status < 500, (path, body, answer)
    if status >= 400:
        assert isinstance(answer, dict) and answer.get("error"), answer
