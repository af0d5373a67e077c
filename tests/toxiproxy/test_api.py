"""The HTTP API answers like Toxiproxy 2.x's (``api.go``): routes, status codes, JSON fields
and error bodies; and toxiproxy-python drives it unchanged."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
import toxiproxy
from toxi_net import connect, recv_exact
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

embedded_only = pytest.mark.usefixtures("_embedded_only")


@pytest.fixture
def _embedded_only(mc_toxiproxy) -> None:
    if not mc_toxiproxy.owned:
        pytest.skip("checks a deliberate difference of the embedded server from Toxiproxy")


def create(mc_faults, name: str, upstream: str, **extra) -> dict:
    status, body = mc_faults.api("POST", "/proxies",
                                 {"name": name, "upstream": upstream,
                                  "listen": "127.0.0.1:0", **extra})
    assert status == 201, body
    return body


def assert_error(answer: tuple[int, object], status: int, message: str) -> None:
    got_status, body = answer
    assert got_status == status, body
    assert isinstance(body, dict) and body["status"] == status, body
    assert body["error"].startswith(message), body


def test_version(mc_faults) -> None:
    status, body = mc_faults.api("GET", "/version")
    assert status == 200 and isinstance(body["version"], str) and body["version"]
    assert json.loads(mc_faults.client().version()) == body


def test_create_show_list_proxy(mc_faults, echo) -> None:
    body = create(mc_faults, "api_a", echo.address)
    assert set(body) == {"name", "listen", "upstream", "enabled", "toxics"}
    assert body["name"] == "api_a" and body["upstream"] == echo.address
    assert body["enabled"] is True and body["toxics"] == []
    host, port = body["listen"].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, "port 0 is replaced by the bound port"
    assert mc_faults.api("GET", "/proxies/api_a") == (200, body)
    status, index = mc_faults.api("GET", "/proxies")
    assert status == 200 and index["api_a"] == body


def test_create_disabled_proxy_does_not_listen(mc_faults, echo) -> None:
    body = create(mc_faults, "api_off", echo.address, enabled=False)
    assert body["enabled"] is False


def test_create_errors(mc_faults, echo) -> None:
    create(mc_faults, "api_dup", echo.address)
    assert_error(mc_faults.api("POST", "/proxies", {"name": "api_dup", "upstream": echo.address,
                                                    "listen": "127.0.0.1:0"}),
                 409, "proxy already exists")
    assert_error(mc_faults.api("POST", "/proxies", {"upstream": echo.address}),
                 400, "missing required field: name")
    assert_error(mc_faults.api("POST", "/proxies", {"name": "api_noup"}),
                 400, "missing required field: upstream")
    assert_error(mc_faults.api("POST", "/proxies", {"name": 5, "upstream": echo.address}),
                 400, "bad request body")


def raw(url: str, method: str, path: str, data: bytes, headers: dict | None = None
        ) -> tuple[int, bytes]:
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_bad_json_is_400_with_message(mc_faults) -> None:
    status, body = raw(mc_faults.url, "POST", "/proxies", b"{not json")
    assert status == 400
    answer = json.loads(body)
    assert answer["status"] == 400 and answer["error"].startswith("bad request body")
    status, body = raw(mc_faults.url, "POST", "/proxies", b"")
    assert status == 400 and json.loads(body)["error"].startswith("bad request body")


def test_update_proxy(mc_faults, echo) -> None:
    body = create(mc_faults, "api_upd", echo.address)
    status, off = mc_faults.api("POST", "/proxies/api_upd", {"enabled": False})
    assert status == 200 and off["enabled"] is False and off["listen"] == body["listen"]
    host, port = body["listen"].rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    status, on = mc_faults.api("PATCH", "/proxies/api_upd", {"enabled": True})
    assert status == 200 and on["enabled"] is True and on["listen"] == body["listen"]
    with connect(on["listen"]) as sock:
        sock.sendall(b"hi")
        assert recv_exact(sock, 2) == b"hi"
    assert_error(mc_faults.api("POST", "/proxies/nope", {"enabled": False}),
                 404, "proxy not found")


def test_delete_proxy(mc_faults, echo) -> None:
    body = create(mc_faults, "api_del", echo.address)
    assert mc_faults.api("DELETE", "/proxies/api_del") == (204, None)
    assert_error(mc_faults.api("DELETE", "/proxies/api_del"), 404, "proxy not found")
    assert_error(mc_faults.api("GET", "/proxies/api_del"), 404, "proxy not found")
    host, port = body["listen"].rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()


def test_toxic_create_defaults_and_fields(mc_faults, echo) -> None:
    create(mc_faults, "api_tox", echo.address)
    status, toxic = mc_faults.api("POST", "/proxies/api_tox/toxics",
                                  {"type": "latency", "attributes": {"latency": 10}})
    assert status == 200, toxic
    assert toxic == {"attributes": {"latency": 10, "jitter": 0}, "name": "latency_downstream",
                     "type": "latency", "stream": "downstream", "toxicity": 1}
    status, up = mc_faults.api("POST", "/proxies/api_tox/toxics",
                               {"type": "bandwidth", "stream": "upstream", "toxicity": 0.5,
                                "attributes": {"rate": 7}})
    assert status == 200 and up["name"] == "bandwidth_upstream" and up["toxicity"] == 0.5
    status, listed = mc_faults.api("GET", "/proxies/api_tox/toxics")
    assert status == 200 and [t["name"] for t in listed] == \
        ["bandwidth_upstream", "latency_downstream"], "upstream chain first, as Toxiproxy"
    assert mc_faults.api("GET", "/proxies/api_tox/toxics/latency_downstream") == (200, toxic)
    status, proxy = mc_faults.api("GET", "/proxies/api_tox")
    assert proxy["toxics"] == listed


def test_toxic_errors(mc_faults, echo) -> None:
    create(mc_faults, "api_terr", echo.address)
    path = "/proxies/api_terr/toxics"
    mc_faults.api("POST", path, {"name": "t1", "type": "latency"})
    assert_error(mc_faults.api("POST", path, {"name": "t1", "type": "timeout"}),
                 409, "toxic already exists")
    assert_error(mc_faults.api("POST", path, {"type": "frobnicate"}), 400, "invalid toxic type")
    assert_error(mc_faults.api("POST", path, {"type": "latency", "stream": "sideways"}),
                 400, "stream was invalid, can be either upstream or downstream")
    assert_error(mc_faults.api("POST", path, {"type": "latency",
                                              "attributes": {"latency": "slow"}}),
                 400, "bad request body")
    assert_error(mc_faults.api("POST", "/proxies/nope/toxics", {"type": "latency"}),
                 404, "proxy not found")
    assert_error(mc_faults.api("GET", path + "/nope"), 404, "toxic not found")
    assert_error(mc_faults.api("POST", path + "/nope", {"toxicity": 0.5}),
                 404, "toxic not found")
    assert_error(mc_faults.api("DELETE", path + "/nope"), 404, "toxic not found")


@embedded_only
def test_stricter_attribute_validation(mc_faults, echo) -> None:
    create(mc_faults, "api_strict", echo.address)
    path = "/proxies/api_strict/toxics"
    for body, words in [
        ({"type": "latency", "attributes": {"latancy": 5}}, "unknown attribute 'latancy'"),
        ({"type": "latency", "attributes": {"latency": -1}}, "'latency' must be >= 0"),
        ({"type": "latency", "toxicity": 2}, "toxicity must be a number from 0 to 1"),
        ({"type": "slicer", "attributes": {"average_size": 0}}, "average_size >= 1"),
        ({"type": "slicer", "attributes": {"average_size": 5, "size_variation": 5}},
         "size_variation < average_size"),
    ]:
        status, answer = mc_faults.api("POST", path, body)
        assert status == 400 and words in answer["error"], (body, answer)
    assert mc_faults.api("GET", path) == (200, [])


def test_toxic_update_merges_attributes(mc_faults, echo) -> None:
    create(mc_faults, "api_tupd", echo.address)
    path = "/proxies/api_tupd/toxics"
    mc_faults.api("POST", path, {"type": "latency", "attributes": {"latency": 100}})
    status, toxic = mc_faults.api("POST", path + "/latency_downstream",
                                  {"attributes": {"jitter": 5}})
    assert status == 200 and toxic["attributes"] == {"latency": 100, "jitter": 5}
    status, toxic = mc_faults.api("PATCH", path + "/latency_downstream", {"toxicity": 0.25})
    assert status == 200 and toxic["toxicity"] == 0.25 and toxic["attributes"]["latency"] == 100
    assert mc_faults.api("DELETE", path + "/latency_downstream") == (204, None)
    assert mc_faults.api("GET", path) == (200, [])


def test_reset_enables_proxies_and_removes_toxics(mc_faults, echo) -> None:
    create(mc_faults, "api_rst", echo.address)
    mc_faults.api("POST", "/proxies/api_rst/toxics", {"type": "timeout"})
    mc_faults.api("POST", "/proxies/api_rst", {"enabled": False})
    assert mc_faults.api("POST", "/reset") == (204, None)
    status, proxy = mc_faults.api("GET", "/proxies/api_rst")
    assert proxy["enabled"] is True and proxy["toxics"] == []
    with connect(proxy["listen"]) as sock:
        sock.sendall(b"alive")
        assert recv_exact(sock, 5) == b"alive"


def test_populate_creates_keeps_and_replaces(mc_faults, echo, make_upstream) -> None:
    other = make_upstream()
    status, body = mc_faults.api("POST", "/populate", [
        {"name": "pop_a", "upstream": echo.address, "listen": "127.0.0.1:0"},
        {"name": "pop_b", "upstream": echo.address, "listen": "127.0.0.1:0", "enabled": False},
    ])
    assert status == 201, body
    assert [(p["name"], p["enabled"]) for p in body["proxies"]] == \
        [("pop_a", True), ("pop_b", False)]
    a = body["proxies"][0]
    status, again = mc_faults.api("POST", "/populate", [
        {"name": "pop_a", "upstream": echo.address, "listen": a["listen"]},
        {"name": "pop_b", "upstream": other.address, "listen": "127.0.0.1:0"},
    ])
    assert status == 201
    assert again["proxies"][0] == a, "same listen and upstream: left untouched"
    assert again["proxies"][1]["upstream"] == other.address, "different upstream: replaced"
    assert again["proxies"][1]["enabled"] is True


def test_populate_errors(mc_faults, echo) -> None:
    status, body = mc_faults.api("POST", "/populate", [
        {"name": "pop_ok", "upstream": echo.address, "listen": "127.0.0.1:0"},
        {"name": "pop_bad", "listen": "127.0.0.1:0"},
    ])
    assert status == 400 and body["error"] == "missing required field: upstream at proxy 2"
    assert body["status"] == 400 and body["proxies"] is None
    assert_error(mc_faults.api("GET", "/proxies/pop_ok"), 404, "proxy not found")
    status, body = raw(mc_faults.url, "POST", "/populate", b"[{")
    assert status == 400 and json.loads(body)["error"].startswith("bad request body")


def test_routing_errors(mc_faults) -> None:
    assert raw(mc_faults.url, "GET", "/nowhere", None)[0] == 404
    assert raw(mc_faults.url, "DELETE", "/version", None)[0] == 405
    assert raw(mc_faults.url, "GET", "/proxies", None,
               {"User-Agent": "Mozilla/5.0"})[0] == 403


@embedded_only
def test_oversized_body_is_refused(mc_faults) -> None:
    status, body = raw(mc_faults.url, "POST", "/proxies", b"[" + b" " * (2 << 20) + b"]")
    assert status == 413 and b"larger than" in body


@embedded_only
def test_non_loopback_addresses_are_refused(mc_faults) -> None:
    for body in ({"name": "far", "upstream": "10.1.2.3:80", "listen": "127.0.0.1:0"},
                 {"name": "wide", "upstream": "127.0.0.1:80", "listen": "0.0.0.0:0"},
                 {"name": "dns", "upstream": "example.com:80", "listen": "127.0.0.1:0"}):
        status, answer = mc_faults.api("POST", "/proxies", body)
        assert status == 400 and "not a loopback address" in answer["error"], answer
    assert mc_faults.api("GET", "/proxies") == (200, {})


def test_toxiproxy_python_drives_every_call(mc_faults, echo) -> None:
    client = mc_faults.client()
    proxy = client.create(upstream=echo.address, name="py_a", listen="127.0.0.1:0")
    assert isinstance(proxy, toxiproxy.Proxy) and proxy.enabled is True
    with pytest.raises(ProxyExists):
        client.create(upstream=echo.address, name="py_a")
    assert set(client.proxies()) == {"py_a"}
    assert client.get_proxy("py_a").listen == proxy.listen and client.get_proxy("nope") is None
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    proxy.add_toxic(type="timeout", name="blackhole", stream="upstream", toxicity=0.0,
                    attributes={"timeout": 0})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "blackhole"}
    assert toxics["blackhole"].stream == "upstream" and toxics["blackhole"].toxicity == 0
    assert proxy.get_toxic("latency_downstream").attributes == {"latency": 5, "jitter": 0}
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="frobnicate")
    with pytest.raises(ProxyExists):  # a duplicate toxic is a 409 too
        proxy.add_toxic(type="latency")
    proxy.destroy_toxic("blackhole")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("blackhole")
    proxy.disable()
    assert client.get_proxy("py_a").enabled is False
    proxy.enable()
    assert client.reset() is True
    assert proxy.toxics() == {}
    populated = client.populate([{"name": "py_b", "upstream": echo.address,
                                  "listen": "127.0.0.1:0"}])
    assert [p.name for p in populated] == ["py_b"]
    client.destroy_all()
    assert client.proxies() == {}


@embedded_only
def test_metrics_count_the_bytes_each_proxy_carries(mc_faults, echo) -> None:
    """``/metrics`` (Toxiproxy's ``-proxy-metrics``) counts bytes per proxy and direction; what
    the MR-2 suite reads to tell whether an engine sent anything toward its metadata store."""
    quiet = create(mc_faults, "api_metrics_quiet", echo.address)
    busy = create(mc_faults, "api_metrics_busy", echo.address)
    assert mc_faults.received_bytes("api_metrics_busy") == {"upstream": 0, "downstream": 0}
    with connect(busy["listen"]) as sock:
        sock.sendall(b"12345")
        assert recv_exact(sock, 5) == b"12345"
    assert mc_faults.received_bytes("api_metrics_busy") == {"upstream": 5, "downstream": 5}
    assert mc_faults.received_bytes(quiet["name"]) == {"upstream": 0, "downstream": 0}
    status, text = raw(mc_faults.url, "GET", "/metrics", None)
    assert status == 200
    assert (f'toxiproxy_proxy_received_bytes_total{{direction="upstream",listener='
            f'"{busy["listen"]}",proxy="api_metrics_busy",upstream="{echo.address}"}} 5'
            ).encode() in text
