"""The Toxiproxy-compatible API server against hostile and idle peers (issue 14)."""

from __future__ import annotations

import json
from urllib.parse import quote

from hostile import (
    RSS_GROWTH_LIMIT,
    UNSUPPORTED,
    crowd_is_dropped,
    footprint,
    fuzz,
    http_request,
    parse_http,
)
from hypothesis import strategies as st

from pytest_mooncake.raw_peers import exchange

SENTINEL = "sentinel-\u2603"
SENTINEL_PROXY = {"name": SENTINEL, "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"}
SENTINEL_TOXIC = {"name": "slow", "type": "latency", "attributes": {"latency": 5}}
LONG = "n" * 100_000


def _api(address, method: str, path: str, body=None) -> tuple[int, bytes]:
    data = b"" if body is None else json.dumps(body).encode()
    headers = {"Content-Length": str(len(data))} if body is not None else {}
    reply = parse_http(exchange(address, http_request(method, path, headers, data)).data)
    return reply.status, reply.body


def _strategy() -> st.SearchStrategy[bytes]:
    name = st.sampled_from(["p1", "p2", "a/b", "", LONG]) | st.text(max_size=12)
    scalar = st.none() | st.booleans() | st.floats() | st.integers(-(2**70), 2**70) | name
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) |
                         st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
    proxy = st.fixed_dictionaries({}, optional={
        "name": name | value, "upstream": st.sampled_from(["127.0.0.1:9", "x", ""]) | value,
        "listen": st.sampled_from(["127.0.0.1:0", "0.0.0.0:0", "nope"]) | value,
        "enabled": value})
    toxic = st.fixed_dictionaries({}, optional={
        "name": name | value, "type": st.sampled_from(["latency", "timeout", "bandwidth",
                                                       "slicer", "nope"]) | value,
        "stream": st.sampled_from(["upstream", "downstream", "x"]) | value,
        "toxicity": value, "attributes": value})
    body = st.one_of(proxy, toxic, st.lists(proxy, max_size=3), value).map(
        lambda v: json.dumps(v).encode())
    body = body | st.integers(129, 20000).map(lambda d: b"[" * d + b"]" * d) | \
        st.binary(max_size=60)
    path = st.one_of(
        st.sampled_from(["/proxies", "/populate", "/version", "/nope"]),
        name.map(lambda n: f"/proxies/{quote(n, safe='')}"),
        st.tuples(st.sampled_from(["p1", "p2"]) | st.text(max_size=6), name).map(
            lambda t: f"/proxies/{quote(t[0], safe='')}/toxics/{quote(t[1], safe='')}"),
        name.map(lambda n: f"/proxies/{quote(n, safe='')}/toxics"))
    request = st.builds(
        lambda m, p, b, exact: http_request(m, p, {"Content-Length": str(len(b) if exact
                                                                          else len(b) + 5)}, b),
        st.sampled_from(["GET", "POST", "POST", "PATCH", "DELETE"]), path, body,
        st.booleans())
    return request | st.binary(max_size=200).map(lambda b: b + b"\r\n\r\n")


def test_fuzzed_requests_get_4xx_with_bounded_messages_and_lose_nothing(start_toxiproxy,
                                                                        mc_seed, mc_processes):
    server = start_toxiproxy()
    sentinel_path = f"/proxies/{quote(SENTINEL, safe='')}"
    assert _api(server.address, "POST", "/proxies", SENTINEL_PROXY)[0] == 201
    assert _api(server.address, "POST", sentinel_path + "/toxics", SENTINEL_TOXIC)[0] == 200
    stored = _api(server.address, "GET", sentinel_path)
    before = footprint(server.pid)

    def check(request: bytes) -> None:
        data = exchange(server.address, request).data
        if not data:
            return
        reply = parse_http(data)
        assert reply.status < 500 or reply.status in UNSUPPORTED, (request[:200], data[:300])
        if reply.status >= 400:
            assert len(reply.body) < 1000, f"a {len(reply.body)}-byte error echoes the request"

    def post(path: str, body: bytes) -> bytes:
        return http_request("POST", path, {"Content-Length": str(len(body))}, body)

    tried = fuzz(mc_seed, _strategy(), check, explicit=[
        post("/proxies", b"[" * 20000 + b"]" * 20000),
        post("/proxies", json.dumps({"name": LONG, "upstream": "127.0.0.1:9"}).encode()),
        post(sentinel_path + "/toxics", json.dumps({"name": "a/b", "type": "latency"}).encode()),
        post(sentinel_path + "/toxics", json.dumps({"name": LONG, "type": "latency"}).encode()),
    ])
    after = footprint(server.pid)
    assert _api(server.address, "GET", sentinel_path) == stored, \
        "a proxy (and its toxic) created before the fuzz changed"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, f"{tried} inputs: {before} -> {after}"
    log = mc_processes.processes[-1].log_text()
    assert LONG[:1000] not in log, "a 100 KB name reached the log whole"
    print(f"Toxiproxy API: {tried} inputs; server before {before}, after {after}")


def test_names_are_bounded_and_toxic_names_have_no_slash(start_toxiproxy):
    server = start_toxiproxy()
    assert _api(server.address, "POST", "/proxies",
                {"name": "p", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"})[0] == 201
    for path, body, words in [
        ("/proxies", {"name": LONG, "upstream": "127.0.0.1:9"}, b"longer than 255"),
        ("/proxies/p/toxics", {"name": "a/b", "type": "latency"}, b"must not contain '/'"),
        ("/proxies/p/toxics", {"name": LONG, "type": "latency"}, b"longer than 255"),
        ("/proxies", json.loads("[" * 500 + "]" * 500), b"nested deeper than 128"),
    ]:
        status, answer = _api(server.address, "POST", path, body)
        assert status == 400 and words in answer and len(answer) < 400, (path, status, answer)


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_toxiproxy):
    server = start_toxiproxy("--idle-timeout", "1", "--read-timeout", "1")
    print(crowd_is_dropped(
        "Toxiproxy API", server.pid, server.address,
        http_request("POST", "/proxies", {"Content-Length": "100"}, b"{"),  # a body that never
        lambda: _api(server.address, "GET", "/version")[0] == 200))           # comes
