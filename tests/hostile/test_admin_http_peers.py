"""The master's admin HTTP port against hostile and idle peers (issue 14)."""

from __future__ import annotations

import json
import socket

from hostile import (
    RSS_GROWTH_LIMIT,
    UNSUPPORTED,
    crowd_is_dropped,
    footprint,
    fuzz,
    html_page,
    http_request,
    http_requests,
    parse_http,
)
from hypothesis import strategies as st

from pytest_mooncake.raw_peers import exchange, read_until_closed

SENTINEL = "admin-sentinel-\u2603"
PATHS = ["/metrics", "/health", "/role", "/ha_status", "/leader", "/ha/promotable",
         "/get_all_keys", "/ha/last_validation", "/ha/promote", "/ha/snapshot", "/nope"]


def _strategy() -> st.SearchStrategy[bytes]:
    scalar = st.none() | st.booleans() | st.floats() | st.text(max_size=10) | \
        st.integers(-(2**70), 2**70)
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) |
                         st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
    body = st.one_of(
        st.fixed_dictionaries({}, optional={"timeout": value}).map(json.dumps),
        value.map(json.dumps), st.text(max_size=60),
        st.integers(129, 5000).map(lambda d: "[" * d + "]" * d),
    ).map(lambda t: t.encode("utf-8", "surrogatepass")) | st.binary(max_size=100)
    return http_requests(["GET", "POST", "POST", "PUT", "DELETE", "HEAD"],
                         st.sampled_from(PATHS) | st.text(max_size=20).map(lambda t: "/" + t),
                         body)


def _check_reply(request: bytes, data: bytes) -> None:
    if not data:
        return  # a garbage request may get no answer, but never a hang
    reply = parse_http(data)
    assert reply.status < 500 or reply.status in UNSUPPORTED, (request[:200], data[:300])
    assert b"Traceback" not in reply.body and not html_page(reply), (request[:200], data[:300])


def test_fuzzed_requests_get_4xx_with_reasons_and_lose_nothing(start_master, mc_seed):
    cluster = start_master()
    assert cluster.client(0).put(SENTINEL)["ok"]
    master = cluster.masters[0]
    address = ("127.0.0.1", master.admin_port)
    before = footprint(master.process.pid)

    def check(request: bytes) -> None:
        _check_reply(request, exchange(address, request).data)

    tried = fuzz(mc_seed, _strategy(), check, explicit=[
        http_request("POST", "/ha/promote", {"Content-Length": "abc"}, b"{}"),
        http_request("POST", "/ha/promote", {"Content-Length": "-1"}, b"{}"),
        http_request("POST", "/ha/promote", {"Content-Length": "10"}, b"{}"),
        http_request("POST", "/ha/promote", {"Content-Length": "17"}, b'{"timeout":"abc"}'),
        http_request("POST", "/ha/promote", {"Content-Length": "6"}, b"[1, 2]"),
        http_request("POST", "/ha/snapshot", {"Content-Length": "20000"},
                     b"[" * 10000 + b"]" * 10000),
        b"\x00\xffGARBAGE\r\n\r\n",
    ])
    after = footprint(master.process.pid)
    keys = json.loads(exchange(address, http_request("GET", "/get_all_keys")).data
                      .partition(b"\r\n\r\n")[2])["keys"]
    assert SENTINEL in keys, "an object stored before the fuzz is gone"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, f"{tried} inputs: {before} -> {after}"
    print(f"master admin HTTP: {tried} inputs; master before {before}, after {after}")


BAD_PROMOTES = [
    ({"Content-Length": "abc"}, b"{}", "bad Content-Length"),
    ({"Content-Length": "-1"}, b"{}", "bad Content-Length"),
    ({"Content-Length": "10"}, b"{}", "body shorter than Content-Length"),
    ({"Content-Length": "17"}, b'{"timeout":"abc"}', "timeout must be a number"),
    ({"Content-Length": "16"}, b'{"timeout":-1.5}', "timeout must be a number"),
    ({"Content-Length": "6"}, b"[1, 2]", "must be a JSON object"),
    ({"Content-Length": "2000"}, b"[" * 1000 + b"]" * 1000, "nested deeper"),
]


def test_bad_promote_requests_are_400_with_a_reason(start_master):
    cluster = start_master()
    address = ("127.0.0.1", cluster.masters[0].admin_port)
    for headers, body, words in BAD_PROMOTES:
        reply = parse_http(exchange(address, http_request("POST", "/ha/promote", headers,
                                                          body)).data)
        assert reply.status == 400 and words in json.loads(reply.body)["error"], (headers, reply)


def test_a_body_that_never_comes_is_a_400_at_the_receive_timeout(start_master):
    cluster = start_master("--admin-recv-timeout", "1")
    address = ("127.0.0.1", cluster.masters[0].admin_port)
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(http_request("POST", "/ha/promote", {"Content-Length": "10"}, b"{}"))
        reply = read_until_closed(s, _deadline(20))
    answer = parse_http(reply.data)
    assert answer.status == 400 and "body shorter than Content-Length" in \
        json.loads(answer.body)["error"], answer


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_master):
    cluster = start_master("--admin-recv-timeout", "1")
    master = cluster.masters[0]
    address = ("127.0.0.1", master.admin_port)
    print(crowd_is_dropped(
        "master admin HTTP port", master.process.pid, address,
        b"GET /health HTTP/1.1\r\nHost: x\r\n",  # a head that never ends
        lambda: parse_http(exchange(address, http_request("GET", "/health")).data).status == 200))


def _deadline(seconds: float) -> float:
    import time  # noqa: PLC0415

    return time.monotonic() + seconds
