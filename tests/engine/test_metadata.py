"""Metadata backends: URIs, key layout, one contract on every backend, the HTTP server's API."""

from __future__ import annotations

import http.client
import json
import sys

import pytest

from pytest_mooncake.runtime.processes import log_matches
from reference_engine.metadata import (
    KeyLayout,
    MetadataError,
    MetadataUriError,
    open_store,
    parse_uri,
)
from reference_engine.metadata.etcd_store import EtcdStore
from reference_engine.metadata.http_server import MetadataHttpServer
from reference_engine.metadata.http_store import HttpStore
from reference_engine.metadata.memory_store import MemoryStore
from reference_engine.metadata.redis_store import RedisStore, db_index_from_env


@pytest.mark.parametrize("uri, kind, detail", [
    ("etcd://127.0.0.1:2379", "etcd", (("127.0.0.1", 2379),)),
    ("127.0.0.1:2379", "etcd", (("127.0.0.1", 2379),)),
    ("etcd://127.0.0.1:1;127.0.0.1:2", "etcd", (("127.0.0.1", 1), ("127.0.0.1", 2))),
    ("etcd://[::1]:2379", "etcd", (("::1", 2379),)),
    ("http://127.0.0.1:8080/metadata", "http", "http://127.0.0.1:8080/metadata"),
    ("redis://127.0.0.1:6379", "redis", (("127.0.0.1", 6379),)),
])
def test_uris_as_mooncake_spells_them(uri, kind, detail):
    parsed = parse_uri(uri)
    assert parsed.kind == kind
    assert (parsed.url if kind == "http" else parsed.endpoints) == detail


@pytest.mark.parametrize("uri, words", [
    ("", "empty"),
    ("etcd://", "no etcd endpoint"),
    ("etcd://localhost", "not host:port"),
    ("etcd://h:99999", "bad port"),
    ("http://127.0.0.1:8080", "needs the path"),
    ("redis://127.0.0.1", "not host:port"),
    ("redis://a:1;b:2", "redis takes one host:port"),
    ("ftp://x:1/y", "unknown scheme 'ftp'"),
])
def test_bad_uris_are_named(uri, words):
    with pytest.raises(MetadataUriError, match=words):
        parse_uri(uri)


def test_key_layout_and_cluster_id_prefix(monkeypatch):
    plain = KeyLayout()
    assert plain.segment_key("127.0.0.1:1") == "mooncake/ram/127.0.0.1:1"
    assert plain.segment_key("a/b") == "mooncake/a/b"
    assert plain.rpc_meta_key("seg") == "mooncake/rpc_meta/seg"
    monkeypatch.setenv("MC_METADATA_CLUSTER_ID", "c1")
    assert KeyLayout.from_env().segment_key("s") == "mooncake/c1/ram/s"
    assert KeyLayout("c1/").rpc_meta_key("s") == "mooncake/c1/rpc_meta/s"


@pytest.fixture
def http_server():
    server = MetadataHttpServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "etcd", "redis", "http"])
def store(request, tmp_path):
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "etcd":
        etcd = request.getfixturevalue("mc_etcd")
        s = open_store(etcd.uri)
        prefix = f"test/{tmp_path.name}/"
        yield _Prefixed(s, prefix)
        for key in s.keys(prefix):
            s.delete(key)
        s.close()
        return
    if request.param == "redis":
        redis = request.getfixturevalue("mc_redis")
        s = open_store(redis.uri)
        prefix = f"test/{tmp_path.name}/"
        yield _Prefixed(s, prefix)
        for key in s.keys(prefix):
            s.delete(key)
        s.close()
        return
    server = request.getfixturevalue("http_server")
    yield open_store(server.url)


class _Prefixed:
    """Keeps tests on a shared etcd apart."""

    def __init__(self, inner, prefix):
        self.inner, self.prefix = inner, prefix

    def get(self, k):
        return self.inner.get(self.prefix + k)

    def put(self, k, v):
        self.inner.put(self.prefix + k, v)

    def delete(self, k):
        return self.inner.delete(self.prefix + k)

    def keys(self, p=""):
        return [k[len(self.prefix):] for k in self.inner.keys(self.prefix + p)]


def test_store_contract(store):
    assert store.get("mooncake/ram/a") is None
    store.put("mooncake/ram/a", b'{"x":1}\n')
    store.put("mooncake/ram/b", b"\xff\x00binary")
    store.put("other/c", b"")
    assert store.get("mooncake/ram/a") == b'{"x":1}\n'
    assert store.get("mooncake/ram/b") == b"\xff\x00binary"
    assert store.get("other/c") == b""
    assert store.keys("mooncake/ram/") == ["mooncake/ram/a", "mooncake/ram/b"]
    store.put("mooncake/ram/a", b"2")
    assert store.get("mooncake/ram/a") == b"2"
    assert store.delete("mooncake/ram/a") is True
    assert store.delete("mooncake/ram/a") is False
    assert store.get("mooncake/ram/a") is None


def test_keys_with_odd_characters_survive_http(http_server):
    s = HttpStore(http_server.url)
    for key in ("mooncake/ram/[::1]:17001", "k with space&x=1", "mooncake/ram/π"):
        s.put(key, b"v")
        assert s.get(key) == b"v"
        assert key in s.keys("")


def test_etcd_fails_over_to_the_next_endpoint(mc_etcd):
    from pytest_mooncake.runtime.ports import free_port

    dead = ("127.0.0.1", free_port())
    live = tuple(parse_uri(mc_etcd.uri).endpoints)
    s = EtcdStore((dead, *live), timeout=2)
    s.put("test/failover", b"1")
    assert s.get("test/failover") == b"1"
    assert s.delete("test/failover")
    s.close()


def test_unreachable_stores_raise_metadata_error_naming_the_key():
    from pytest_mooncake.runtime.ports import free_port

    port = free_port()
    for s in (EtcdStore([("127.0.0.1", port)], timeout=1),
              RedisStore("127.0.0.1", port, timeout=1),
              HttpStore(f"http://127.0.0.1:{port}/metadata", timeout=1)):
        with pytest.raises(MetadataError, match="mooncake/ram/x"):
            s.get("mooncake/ram/x")


def test_redis_keys_are_mooncakes_plain_strings_with_glob_characters_kept_literal(mc_redis):
    """Mooncake's plugin stores each key as a plain Redis string (GET/SET/DEL); a key prefix
    with SCAN's glob characters must list only its own keys."""
    s = open_store(mc_redis.uri)
    raw = mc_redis.client()
    try:
        s.put("test/glob/mooncake/ram/[::1]:1", b'{"a":1}\n')
        s.put("test/glob/mooncake/ram/x1", b"other")
        assert raw.type("test/glob/mooncake/ram/[::1]:1") == b"string"
        assert raw.get("test/glob/mooncake/ram/[::1]:1") == b'{"a":1}\n'
        assert s.keys("test/glob/mooncake/ram/[") == ["test/glob/mooncake/ram/[::1]:1"]
    finally:
        for key in s.keys("test/glob/"):
            s.delete(key)
        s.close()
        raw.close()


def test_redis_database_comes_from_mc_redis_db_index_as_mooncake_reads_it(mc_redis):
    assert [db_index_from_env({"MC_REDIS_DB_INDEX": v}) for v in ("3", "255", "256", "-1",
                                                                   "x", "")] == [3, 255, 0, 0, 0, 0]
    host, port = mc_redis.address.rsplit(":", 1)
    s = RedisStore(host, int(port), environ={"MC_REDIS_DB_INDEX": "5"})
    db5, db0 = mc_redis.client(db=5), mc_redis.client(db=0)
    try:
        s.put("test/db-index", b"5")
        assert db5.get("test/db-index") == b"5"
        assert db0.get("test/db-index") is None
    finally:
        s.delete("test/db-index")
        for c in (s, db5, db0):
            c.close()


def test_redis_account_comes_from_mc_redis_password_as_mooncake_reads_it(tmp_path):
    """A Redis that requires a password: the store authenticates with ``MC_REDIS_PASSWORD``
    (and ``MC_REDIS_USERNAME``, here the default user), and without it every operation is a
    MetadataError naming the key and Redis' refusal."""
    from pytest_mooncake.runtime.redis_process import RedisServer

    server = RedisServer(tmp_path / "dir", tmp_path / "redis.log", password="s3cret").start()
    host, port = server.address.rsplit(":", 1)
    try:
        good = RedisStore(host, int(port), environ={"MC_REDIS_PASSWORD": "s3cret",
                                                    "MC_REDIS_USERNAME": "default"})
        good.put("mooncake/ram/auth", b"v")
        assert good.get("mooncake/ram/auth") == b"v"
        with pytest.raises(MetadataError, match="mooncake/ram/auth.*(?i:auth)"):
            RedisStore(host, int(port), environ={}).get("mooncake/ram/auth")
        good.close()
    finally:
        server.close()


# ----------------------------------------------------------------------- HTTP server API


def _request(server, method, target, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_http_status_codes_follow_mooncake(http_server):
    s = http_server
    assert _request(s, "GET", "/metadata") == (400, "Missing key parameter")
    assert _request(s, "GET", "/metadata?key=") == (400, "Missing key parameter")
    assert _request(s, "GET", "/metadata?key=a") == (404, "metadata not found")
    assert _request(s, "DELETE", "/metadata?key=a") == (404, "metadata not found")
    assert _request(s, "PUT", "/metadata?key=a", b"1") == (200, "metadata updated")
    assert _request(s, "PUT", "/metadata?key=a", b"2") == (200, "metadata updated")
    assert _request(s, "GET", "/metadata?key=a") == (200, "2")
    assert _request(s, "DELETE", "/metadata?key=a") == (200, "metadata deleted")
    assert _request(s, "GET", "/health") == (200, "OK")
    assert _request(s, "GET", "/other?key=a")[0] == 404
    assert _request(s, "POST", "/metadata?key=a", b"1")[0] == 405


def test_http_rpc_meta_reput_only_when_identical(http_server):
    s, key = http_server, "/metadata?key=mooncake/rpc_meta/seg"
    body = b'{"ip_or_host_name":"127.0.0.1","rpc_port":1}'
    assert _request(s, "PUT", key, body)[0] == 200
    assert _request(s, "PUT", key, body) == (200, "metadata unchanged")
    assert _request(s, "PUT", key, body.replace(b"1}", b"2}")) == (
        400, "Duplicate rpc_meta key not allowed")
    assert _request(s, "DELETE", key)[0] == 200
    assert _request(s, "PUT", key, body.replace(b"1}", b"2}"))[0] == 200


def test_http_rejects_oversized_and_unframed_bodies_with_4xx():
    s = MetadataHttpServer(max_body=1024).start()
    try:
        _oversized_and_unframed(s)
    finally:
        s.stop()


def _oversized_and_unframed(s):
    status, text = _request(s, "PUT", "/metadata?key=big", b"x" * (s.max_body + 1))
    assert status == 413 and "exceeds the limit" in text
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
    conn.putrequest("PUT", "/metadata?key=nolen")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 411
    conn.close()
    assert _request(s, "PUT", "/metadata?key=a&key=b", b"1")[0] == 400
    assert _request(s, "GET", "/metadata?key=big")[0] == 404
    assert _request(s, "GET", "/health") == (200, "OK")


def test_metadata_server_process_serves_the_api(mc_processes):
    proc = mc_processes.start(
        "metadata-server",
        [sys.executable, "-m", "reference_engine", "metadata-server", "--listen", "127.0.0.1:0"],
        ready=log_matches(r'"event": "ready"'),
    )
    ready = next(json.loads(line) for line in proc.log_text().splitlines()
                 if line.startswith("{") and '"ready"' in line)
    assert ready["url"].startswith("http://127.0.0.1:")
    s = open_store(ready["url"])
    s.put("mooncake/ram/x", b"v")
    assert s.get("mooncake/ram/x") == b"v"
    assert proc.terminate() == 0
