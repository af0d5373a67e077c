"""The HTTP metadata server against hostile and idle peers (issue 14)."""

from __future__ import annotations

import http.client
import sys
from urllib.parse import quote

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

from pytest_mooncake.raw_peers import exchange

SENTINEL_KEY = "mooncake/ram/sentinel-\u2603"
SENTINEL = b'{"stored": "before the fuzz"}'


def _key_target(key: str) -> str:
    return f"/metadata?key={quote(key, safe='')}"


def _strategy() -> st.SearchStrategy[bytes]:
    target = st.one_of(
        st.text(max_size=30).map(_key_target),
        st.text(max_size=10).map(lambda p: f"/metadata/keys?prefix={quote(p, safe='')}"),
        st.sampled_from(["/health", "/metadata", "/metadata?key=", "/metadata?key=a&key=b",
                         "/nope", "/metadata?key=" + "k" * 5000]),
        st.text(max_size=30).map(lambda t: "/" + t.replace(" ", "")))
    return http_requests(["GET", "PUT", "PUT", "DELETE", "POST", "HEAD"], target,
                         st.binary(max_size=200))


def _check_reply(request: bytes, data: bytes) -> None:
    if not data:
        return
    reply = parse_http(data)
    assert reply.status < 500 or reply.status in UNSUPPORTED, (request[:200], data[:300])
    if reply.status >= 400:
        assert reply.headers.get("content-type", "").startswith("text/plain"), data[:300]
        assert len(reply.body) < 300 and not html_page(reply), data[:300]


def test_fuzzed_requests_get_plain_4xx_and_lose_nothing(start_metadata_server, mc_seed):
    server = start_metadata_server()
    put = http_request("PUT", _key_target(SENTINEL_KEY), {"Content-Length": str(len(SENTINEL))},
                       SENTINEL)
    assert parse_http(exchange(server.address, put).data).status == 200
    before = footprint(server.pid)

    def check(request: bytes) -> None:
        _check_reply(request, exchange(server.address, request).data)

    tried = fuzz(mc_seed, _strategy(), check, explicit=[
        b"\x00\xffGARBAGE\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /health\r\n\r\n",  # HTTP/0.9: its reply would have no status line
        http_request("PUT", "/metadata?key=x", {"Content-Length": "abc"}, b"1"),
        http_request("PUT", "/metadata?key=x", {"Content-Length": "5"}, b"1"),
    ])
    after = footprint(server.pid)
    got = parse_http(exchange(server.address,
                              http_request("GET", _key_target(SENTINEL_KEY))).data)
    assert (got.status, got.body) == (200, SENTINEL), "a value stored before the fuzz changed"
    assert after.rss - before.rss < RSS_GROWTH_LIMIT, f"{tried} inputs: {before} -> {after}"
    print(f"metadata HTTP: {tried} inputs; server before {before}, after {after}")


def test_an_oversized_put_gets_its_413_not_a_broken_pipe(start_metadata_server):
    """A client that sends its whole body before reading (http.client, urllib, requests) must
    be able to finish sending and read the refusal."""
    server = start_metadata_server()
    body = b"x" * (9 << 20)
    for _ in range(3):
        conn = http.client.HTTPConnection(*server.address, timeout=30)
        try:
            conn.request("PUT", "/metadata?key=big", body)  # BrokenPipeError before the fix
            answer = conn.getresponse()
            assert answer.status == 413 and b"exceeds the limit" in answer.read()
        finally:
            conn.close()


def test_garbage_gets_a_short_plain_error(start_metadata_server):
    server = start_metadata_server()
    for garbage in (b"\x00\xff\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                    b"GET /\n HTTP/1.1\r\n\r\n",
                    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"):
        answer = parse_http(exchange(server.address, garbage).data)
        assert 400 <= answer.status < 500 or answer.status == 505, answer
        assert answer.headers["content-type"].startswith("text/plain"), answer
        assert len(answer.body) < 300 and not html_page(answer), answer


def test_non_loopback_listen_needs_the_flag(mc_processes):
    argv = [sys.executable, "-m", "reference_engine", "metadata-server", "--listen", "0.0.0.0:0"]
    proc = mc_processes.start("wide-open", argv)
    assert proc.wait_exit(20) == 2
    assert "--allow-non-loopback" in proc.log_text()


def test_idle_and_stalled_peers_are_dropped_at_the_receive_timeout(start_metadata_server):
    server = start_metadata_server("--recv-timeout", "1")
    health = http_request("GET", "/health")
    print(crowd_is_dropped(
        "metadata HTTP server", server.pid, server.address,
        http_request("PUT", "/metadata?key=slow", {"Content-Length": "100"}, b"{"),
        lambda: parse_http(exchange(server.address, health).data).status == 200))

