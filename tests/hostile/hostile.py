"""Helpers of the hostile-peer tests: seeded fuzz runs, crowds of idle peers, a server process's
footprint (resident memory, threads) read from /proc."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from pytest_mooncake.raw_peers import closed_by_server
from pytest_mooncake.waits import wait_until

RSS_GROWTH_LIMIT = 64 << 20
"""A fuzz run may grow a server's resident memory by at most this much."""
UNSUPPORTED = (501, 505)
"""The 5xx an HTTP server may answer a request it cannot serve (an unknown method, HTTP/9.9):
they name the request's fault, unlike a 500."""
FUZZ_EXAMPLES = int(os.environ.get("MC_FUZZ_EXAMPLES", "120"))
"""Generated inputs per fuzz run (plus the explicit ones): 120 fits the CI budget (about 5 s a
server); ``MC_FUZZ_EXAMPLES`` asks for more (tests/benchmarks/bench_hostile_peers.py)."""


@dataclass(frozen=True)
class Footprint:
    rss: int
    threads: int

    def __str__(self) -> str:
        return f"{self.rss / 2**20:.1f} MiB resident, {self.threads} threads"


def footprint(pid: int) -> Footprint:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return Footprint(int(fields["VmRSS"][0]) * 1024, int(fields["Threads"][0]))


def fuzz(seed: int, strategy: st.SearchStrategy, check: Callable[[Any], None],
         explicit: Iterable[Any] = (), examples: int = FUZZ_EXAMPLES) -> int:
    """Run ``check`` on every ``explicit`` input and on ``examples`` inputs drawn from
    ``strategy`` with ``seed`` (a failure shrinks and replays from the same seed); the number
    of inputs tried."""
    tried = [0]

    def counted(case: Any) -> None:
        tried[0] += 1
        check(case)

    run = settings(max_examples=examples, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck),
                   phases=[Phase.explicit, Phase.generate, Phase.shrink])(given(strategy)(counted))
    for case in reversed(list(explicit)):
        run = _example(run, case)
    hypothesis_seed(seed)(run)()
    return tried[0]


def _example(run: Callable[..., None], case: Any) -> Callable[..., None]:
    from hypothesis import example  # noqa: PLC0415

    return example(case)(run)


def idle_crowd(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` connections that send nothing."""
    return [socket.create_connection(address, timeout=10) for _ in range(count)]


IDLE_PEERS = 200
STALLED_PEERS = 5


def crowd_is_dropped(name: str, pid: int, address: tuple[str, int], stall: bytes,
                     good: Callable[[], bool]) -> str:
    """With ``IDLE_PEERS`` connections that send nothing and ``STALLED_PEERS`` that sent
    ``stall`` (a request that never completes) open: a good peer is served (``good()``), the
    idle ones hold no thread (the server's threads grow by at most one per stalled peer, plus
    two for the good peer's session, plus one per ten idle peers for threads of its own), and the server closes all of them (start it with a short
    receive timeout). Returns a line with the footprints for the test log."""
    before = footprint(pid)
    idle = idle_crowd(address, IDLE_PEERS)
    stalled = idle_crowd(address, STALLED_PEERS)
    try:
        for s in stalled:
            s.sendall(stall)
        assert good(), (f"a good peer was not served while {IDLE_PEERS} idle and "
                        f"{STALLED_PEERS} stalled peers were connected to the {name}")
        crowded = footprint(pid)
        # a server holding a thread per idle peer grows by IDLE_PEERS; the slack of one per ten
        # covers the process's own threads that start in the meantime (seen in a loaded CI
        # run: the reference master went from 13 to 21 threads, 8 of which no peer held)
        assert crowded.threads <= before.threads + STALLED_PEERS + 2 + IDLE_PEERS // 10, (
            f"{IDLE_PEERS} idle peers took the {name} from {before} to {crowded}: an idle "
            f"connection must not hold a thread")
        wait_closed(idle + stalled, 20, f"the {name} to close {IDLE_PEERS} idle and "
                                        f"{STALLED_PEERS} stalled peers at its receive timeout")
        assert good(), f"the {name} no longer serves a good peer after the crowd"
        return (f"{name}, {IDLE_PEERS} idle + {STALLED_PEERS} stalled peers: before {before}, "
                f"with them {crowded}, after {footprint(pid)}")
    finally:
        close_all(idle + stalled)


def wait_closed(socks: list[socket.socket], timeout: float, what: str) -> None:
    """Wait until the server closed every one of ``socks``."""
    wait_until(lambda: all(closed_by_server(s) for s in socks), timeout, what,
               describe=lambda _: f"{sum(not closed_by_server(s) for s in socks)} of "
                                  f"{len(socks)} still open")


def close_all(socks: Iterable[socket.socket]) -> None:
    for s in socks:
        s.close()


# ---------------------------------------------------------------------- raw HTTP


LENGTHS = ["exact", "exact", "none", "abc", "-1", "+5", "1e3", "longer", "shorter", " 7 ",
           "9437184", "99999999999999999999999"]


def http_requests(methods: list[str], targets: st.SearchStrategy[str],
                  bodies: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Raw HTTP requests (right, wrong, missing or absurd Content-Length; sometimes chunked),
    and garbage that ends like a request head."""

    def build(method: str, target: str, body: bytes, length: str, chunked: bool) -> bytes:
        headers = {}
        if length in ("exact", "longer", "shorter"):
            headers["Content-Length"] = str(max(0, len(body) + {"exact": 0, "longer": 10,
                                                                "shorter": -1}[length]))
        elif length != "none":
            headers["Content-Length"] = length
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
        return http_request(method, target, headers, body)

    request = st.builds(build, st.sampled_from(methods), targets, bodies,
                        st.sampled_from(LENGTHS), st.booleans())
    return request | st.binary(max_size=200).map(lambda b: b + b"\r\n\r\n")


def http_request(method: str, target: str, headers: dict[str, str] | None = None,
                 body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_http(data: bytes) -> HttpReply:
    """The first response in ``data``; AssertionError if it is not one."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, f"no HTTP response, got {data[:120]!r}"
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest_line = lines[0].partition(" ")
    assert version.startswith("HTTP/1."), f"not an HTTP status line: {lines[0]!r}"
    status = int(rest_line.split(" ", 1)[0])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", len(rest)))
    return HttpReply(status, headers, rest[:length])


def html_page(reply: HttpReply) -> bool:
    """An HTML error page (the stdlib's), not a short reason; a reason may quote the request."""
    start = reply.body.lstrip()[:20].lower()
    return reply.headers.get("content-type", "").startswith("text/html") or \
        start.startswith((b"<!doctype", b"<html"))
