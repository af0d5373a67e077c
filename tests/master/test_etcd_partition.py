"""Only the leader's etcd traffic is cut: the leader master talks to etcd through a Toxiproxy
proxy, the standby and the store clients talk to etcd directly. The standby must take over,
the old leader must stop acting as leader once its lease may have expired, and the history of
operations (who answered, in which view, invoke/complete times) must show no two leaders
accepting writes in overlapping time and no acknowledged write lost after the heal.

Unlike an etcd outage for everyone (test_etcd_outage.py), here a second leader *can* be
elected while the first one still runs and still has clients talking to it, so a master that
kept serving without its lease would show up in the history.

The same scenario runs on Redis HA (``ha="redis"``): the masters elect on a Redis leader hash
and keep their OpLog there, and the leader's Redis traffic is cut the same three ways.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import pytest

from pytest_mooncake.waits import wait_until
from reference_engine.master.error_codes import MasterError
from reference_engine.master.model import SegmentInfo
from reference_engine.master.protocol import (
    MASTER_VERSION,
    ConnectionClosed,
    ProtocolError,
    recv_frame,
    send_frame,
)

NOT_LEADER = "NOT_LEADER"
LINK_ERRORS = (OSError, ConnectionClosed, ProtocolError)


@dataclass
class Op:
    """One write attempt. ``master`` is the index of the master it was sent to (pinned workers)
    or None (a discovering store client: who answered is known from ``view`` only)."""

    worker: str
    key: str
    master: int | None
    invoke: float
    complete: float
    ok: bool
    code: str | None = None
    """Error code of the answer; None for a success or when no answer came (link error)."""
    answered: bool = True
    view: int | None = None
    seq: int | None = None

    @property
    def answered_as_leader(self) -> bool:
        """The master handled the request (accepted it, or failed it after accepting it)
        instead of answering NOT_LEADER."""
        return self.answered and self.code != NOT_LEADER


class PinnedLink:
    """A raw RPC connection to one given master, bypassing leader discovery: it keeps sending
    to that master whatever etcd says, as a client that has not noticed a failover would."""

    def __init__(self, address: str, client_id: str, timeout: float = 3.0):
        self.address, self.client_id, self.timeout = address, client_id, timeout
        self.sock: socket.socket | None = None
        self.next_id = 1

    def _connect(self) -> socket.socket:
        host, _, port = self.address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=self.timeout)
        send_frame(sock, {"op": "hello", "version": MASTER_VERSION, "client_id": self.client_id})
        reply = recv_frame(sock)
        if not reply.get("ok"):
            sock.close()
            raise ConnectionError(f"hello refused: {reply}")
        return sock

    def call(self, op: str, args: dict) -> dict:
        if self.sock is None:
            self.sock = self._connect()
        try:
            send_frame(self.sock, {"id": self.next_id, "op": op,
                                   "args": {**args, "client_id": self.client_id}})
            self.next_id += 1
            return recv_frame(self.sock)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def pinned_writer(link: PinnedLink, master: int, name: str, stop: threading.Event,
                  ops: list[Op]) -> None:
    i = 0
    while not stop.is_set():
        key = f"{name}-{i}"
        i += 1
        invoke = time.monotonic()
        try:
            reply = link.call("put_start", {"key": key, "size": 32, "replica_num": 1})
            if reply.get("ok"):
                reply = link.call("put_end", {"key": key})
        except LINK_ERRORS:
            ops.append(Op(name, key, master, invoke, time.monotonic(), False, answered=False))
            stop.wait(0.05)
            continue
        done = time.monotonic()
        if reply.get("ok"):
            result = reply["result"]
            ops.append(Op(name, key, master, invoke, done, True, view=result["view_version"],
                          seq=result["sequence_id"]))
        else:
            ops.append(Op(name, key, master, invoke, done, False, code=reply.get("error")))
            stop.wait(0.02)  # pacing, not synchronisation: a standby answers NOT_LEADER at once


def discovering_writer(client, name: str, stop: threading.Event, ops: list[Op]) -> None:
    i = 0
    while not stop.is_set():
        key = f"{name}-{i}"
        i += 1
        invoke = time.monotonic()
        try:
            result = client.put(key, 32)
        except MasterError as exc:
            ops.append(Op(name, key, None, invoke, time.monotonic(), False, code=exc.code.value))
            stop.wait(0.02)
            continue
        ops.append(Op(name, key, None, invoke, time.monotonic(), True,
                      view=result["view_version"], seq=result["sequence_id"]))


@dataclass
class Observation:
    master: int
    start: float
    end: float
    serving: bool
    view: int


def monitor(cluster, masters: list[int], stop: threading.Event, seen: list[Observation]) -> None:
    while not stop.is_set():
        for m in masters:
            start = time.monotonic()
            try:
                h = cluster.health(m)
            except (OSError, ValueError):
                continue
            seen.append(Observation(m, start, time.monotonic(), bool(h.get("service_ready")),
                                    int(h.get("view_version") or 0)))
        stop.wait(0.02)


CUTS = {
    # proxy disabled: connections dropped, new ones refused
    "refused": None,
    # timeout toxics both ways: connections stay open, nothing gets through either way
    "blackhole": ("upstream", "downstream"),
    # etcd's answers are lost, the leader's requests still arrive (keepalives keep the lease
    # alive in etcd while its holder cannot know it)
    "answers_lost": ("downstream",),
}


def cut_off(proxy, cut: str) -> None:
    if CUTS[cut] is None:
        proxy.disable()
    for stream in CUTS[cut] or ():
        proxy.add_toxic(type="timeout", name=f"blackhole-{stream}", stream=stream,
                        attributes={"timeout": 0})


def heal(proxy, cut: str) -> None:
    if CUTS[cut] is None:
        proxy.enable()
    for stream in CUTS[cut] or ():
        proxy.destroy_toxic(f"blackhole-{stream}")


@pytest.mark.mc_req("MP-6")
@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("ha", ["etcd", "redis"])
def test_leader_cut_from_etcd_steps_down_and_the_standby_takes_over(
        cluster_factory, request, mc_faults, cut, ha):
    """``ha``: the store the masters elect on and keep their OpLog in (etcd, or Redis: the
    leader hash's PEXPIRE is the lease)."""
    store = (request.getfixturevalue("mc_redis").address if ha == "redis"
             else request.getfixturevalue("mc_etcd").endpoints[0])
    proxy, via = mc_faults.proxy(f"leader-{ha}", store)
    cluster = cluster_factory("rfc", masters=0, start=False, write_timeout=1.0, ha=ha)
    old = cluster.start_master(**{ha: via})
    assert cluster.leader(timeout=30) == old
    new = cluster.start_master()
    cluster.wait_caught_up(new, timeout=20)
    ttl = cluster.lease_ttl
    old_view = cluster.health(old)["view_version"]

    clients = [cluster.library_client(
        client_id=f"d{i}", reattach_timeout=1.0,
        segment=SegmentInfo(f"d{i}", f"d{i}@127.0.0.1", (i + 1) << 40, 1 << 30)).start(wait=10)
        for i in range(2)]
    links = {m: PinnedLink(cluster.masters[m].address, f"pin{m}") for m in (old, new)}
    ops: list[Op] = []
    seen: list[Observation] = []
    stop = threading.Event()
    threads = [threading.Thread(target=discovering_writer, args=(c, c.client_id, stop, ops))
               for c in clients]
    threads += [threading.Thread(target=pinned_writer, args=(links[m], m, f"pin{m}", stop, ops))
                for m in (old, new)]
    threads.append(threading.Thread(target=monitor, args=(cluster, [old, new], stop, seen)))
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(o.ok and o.master == old for o in ops) >= 10
                   and sum(o.ok and o.master is None for o in ops) >= 20, 30,
                   "writes acknowledged through both paths before the cut")
        cut_off(proxy, cut)
        cut_at = time.monotonic()   # from here the leader hears nothing from etcd

        wait_until(lambda: cluster.health(new)["service_ready"], 30,
                   "the standby to take over while the old leader is cut from etcd")
        takeover = time.monotonic() - cut_at
        wait_until(lambda: not cluster.health(old)["service_ready"], 30,
                   "the old leader to stop serving")
        new_view = cluster.health(new)["view_version"]
        wait_until(lambda: sum(o.ok and o.view == new_view for o in ops) >= 20, 30,
                   "writes acknowledged by the new leader")
        # The old leader has been asked (and must have refused) while the new one served.
        wait_until(lambda: sum(o.master == old and o.answered and o.invoke > cut_at + ttl
                               for o in ops) >= 5, 30,
                   "requests reaching the old leader after its lease ran out")

        heal(proxy, cut)
        healed_at = time.monotonic()
        wait_until(lambda: cluster.health(old)["role"] == "standby"
                   and cluster.health(old)["view_version"] == new_view, 30,
                   "the old leader to rejoin as a standby of the new view")
        before = sum(o.ok for o in ops)
        wait_until(lambda: sum(o.ok for o in ops) >= before + 10, 30, "writes after the heal")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
        for link in links.values():
            link.close()
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    cluster.wait_caught_up(old, timeout=30)

    acks = [o for o in ops if o.ok]
    views = {o.view for o in acks}
    first_new_ack = min(o.complete for o in acks if o.view == new_view)
    first_new_serving = min(s.end for s in seen if s.master == new and s.serving)
    new_began = min(first_new_ack, first_new_serving)
    # The last keepalive the old leader saw answered was sent before the cut, so from
    # cut + TTL on it cannot know its lease is alive (etcd may have expired it).
    lease_unsure = cut_at + ttl
    print(f"\n[{ha}/{cut}] takeover observed {takeover:.2f}s after the cut (lease TTL {ttl}s); "
          f"new leader serving {new_began - cut_at:.2f}s after the cut; "
          f"{len(ops)} attempts, {len(acks)} acks, views {sorted(views)}; "
          f"heal {healed_at - cut_at:.2f}s after the cut")

    assert new_view > old_view and views == {old_view, new_view}
    # 1. The old leader accepts nothing once its lease may have expired or a new leader serves
    #    (not even a put_start: only a NOT_LEADER answer is allowed).
    late = [o for o in ops if o.master == old and o.answered_as_leader
            and o.invoke > min(lease_unsure, new_began)]
    assert late == [], "the cut-off leader handled requests after losing its lease"
    late_acks = [o for o in acks if o.view == old_view and o.invoke > min(lease_unsure, new_began)]
    assert late_acks == [], "a write was acknowledged in the old view after the new leader began"
    # 2. Never two masters saying they serve at once: no observation of the old leader serving
    #    that began after the new leader was seen serving.
    both = [s for s in seen if s.master == old and s.serving and s.start > first_new_serving]
    assert both == [], "the old leader still reported serving after the new leader did"
    # 3. The history is one sequence: unique sequence ids, views never going back.
    by_seq = sorted(acks, key=lambda o: o.seq)
    assert len({o.seq for o in acks}) == len(acks), "two acknowledgements share a sequence id"
    assert [o.view for o in by_seq] == sorted(o.view for o in by_seq), \
        "an acknowledgement of the old view follows one of the new view in the OpLog"
    # 4. Nothing acknowledged is lost, on the new leader nor on the healed old one.
    leader = cluster.leader()
    assert leader == new
    for m in (new, old):
        keys = set(cluster.keys(m))
        lost = [o.key for o in acks if o.key not in keys]
        assert lost == [], f"master {m} lost acknowledged writes"
