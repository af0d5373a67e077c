"""Real Mooncake 0.3.13 engines and reference TCP transports move bytes both ways.

Each backend (etcd, our HTTP metadata server, the wheel's HTTP metadata server) gets one real
engine; every test publishes a fresh reference segment so no engine has it cached.
"""

from __future__ import annotations

import random
import socket
import time

import pytest

from reference_engine import descriptor
from reference_engine.metadata import KeyLayout
from reference_engine.transport import PeerRejectedError, wire

pytestmark = pytest.mark.interop

BLOCK = 4096
BATCH = 128


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


@pytest.mark.mc_req("MR-8")
@pytest.mark.parametrize("instance_id", ["5f" * 16, None], ids=["with-instance_id", "legacy"])
def test_real_engine_writes_and_reads_a_reference_buffer(
    real_engine, ref_segment, metadata, instance_id
):
    raw = ref_segment.publish(metadata.store, instance_id=instance_id)
    assert (b'"instance_id"' in raw) == (instance_id is not None)
    seg, base, mem = ref_segment.name, ref_segment.addr, ref_segment.mem

    assert real_engine.write(seg, base + 5, b"from real mooncake") == 0
    assert mem[5:23] == b"from real mooncake"

    mem[1000:1010] = b"0123456789"
    assert real_engine.read(seg, base + 1000, 10) == (0, b"0123456789")

    payload = random.Random(3).randbytes(BLOCK * BATCH)
    remotes = [base + 65536 + i * BLOCK for i in range(BATCH)]
    assert real_engine.write_batch(seg, remotes, BLOCK, payload) == 0
    assert mem[65536 : 65536 + len(payload)] == payload
    assert real_engine.read_batch(seg, remotes, BLOCK) == (0, payload)
    assert ref_segment.transport.server_stats().rejected == 0


def test_real_engine_speaks_v1_to_a_segment_that_advertises_v1(real_engine, ref_segment, metadata):
    # Mooncake picks the framing from the target's tcp_proto_version: our server must serve both
    ref_segment.publish(metadata.store, instance_id="c3" * 16, proto_version=1)
    seg, base, mem = ref_segment.name, ref_segment.addr, ref_segment.mem
    assert real_engine.write(seg, base + 64, b"v1 framing") == 0
    # v1 has no acknowledgement: "completed" only means the bytes left the initiator
    wait_until(lambda: mem[64:74] == b"v1 framing", 10, "the v1 WRITE to land")
    assert real_engine.read(seg, base + 64, 10) == (0, b"v1 framing")


@pytest.mark.mc_req("MR-18")
def test_real_engine_is_rejected_outside_the_registered_buffer(real_engine, ref_segment, metadata):
    # the published descriptor claims twice the memory the process registered (as a stale
    # descriptor of a predecessor would); the server must refuse the difference
    ref_segment.publish(metadata.store, instance_id="a1" * 16, advertised_size=2 * ref_segment.size)
    seg, base, mem = ref_segment.name, ref_segment.addr, ref_segment.mem
    before = bytes(mem[-16:])

    assert real_engine.write(seg, base + ref_segment.size - 8, b"straddles end!!!") != 0
    assert real_engine.read(seg, base + ref_segment.size + 64, 8)[0] != 0
    assert bytes(mem[-16:]) == before
    assert ref_segment.transport.server_stats().rejected == 2
    assert real_engine.write(seg, base, b"still serving") == 0
    assert mem[:13] == b"still serving"


def _real_descriptor(metadata, real_engine):
    raw = metadata.store.get(KeyLayout().segment_key(real_engine.name))
    assert raw is not None, f"real engine {real_engine.name} published no descriptor"
    return descriptor.decode(raw, real_engine.name)


def test_reference_writes_and_reads_a_real_engine_buffer(real_engine, ref_segment, metadata):
    desc = _real_descriptor(metadata, real_engine)
    assert desc.protocol == "tcp" and desc.tcp_proto_version == 2
    assert desc.find_buffer(real_engine.buffer, real_engine.size) is not None
    host, port = desc.data_endpoint()
    assert host == "127.0.0.1"
    t, rbuf = ref_segment.transport, real_engine.buffer

    t.write(host, port, rbuf + 7, b"from the reference engine")
    assert real_engine.peek(7, 25) == b"from the reference engine"

    real_engine.poke(4096, b"planted by real")
    assert t.read(host, port, rbuf + 4096, 15) == b"planted by real"

    rng = random.Random(4)
    blocks = [rng.randbytes(BLOCK) for _ in range(BATCH)]
    remotes = [rbuf + (1 << 20) + i * BLOCK for i in range(BATCH)]
    t.write_batch(host, port, list(zip(remotes, blocks, strict=True)))
    assert real_engine.peek(1 << 20, BLOCK * BATCH) == b"".join(blocks)
    local = bytearray(BLOCK * BATCH)
    lv = memoryview(local)
    t.read_batch_into(
        host, port, [(r, lv[i * BLOCK : (i + 1) * BLOCK]) for i, r in enumerate(remotes)]
    )
    assert local == b"".join(blocks)

    big = rng.randbytes(3 << 20)
    t.write(host, port, rbuf + (8 << 20), big)
    assert t.read(host, port, rbuf + (8 << 20), len(big)) == big

    t.write(host, port, rbuf + 100, b"legacy framing", proto_version=1)
    assert t.read(host, port, rbuf + 100, 14, proto_version=1) == b"legacy framing"


@pytest.mark.parametrize("length", [16, 8 << 20], ids=["small", "8MiB"])
def test_reference_is_rejected_by_a_real_engine_outside_its_buffers(
    real_engine, ref_segment, metadata, length
):
    host, port = _real_descriptor(metadata, real_engine).data_endpoint()
    t = ref_segment.transport
    outside = 0x1000
    with pytest.raises(PeerRejectedError):
        t.write(host, port, outside, bytes(length))
    with pytest.raises(PeerRejectedError):
        t.read(host, port, outside, length)
    with pytest.raises(PeerRejectedError) as ei:
        t.write_batch(
            host,
            port,
            [(real_engine.buffer, b"ok"), (outside, b"no"), (real_engine.buffer + 2, b"ok")],
        )
    assert list(ei.value.failures) == [1]
    assert real_engine.peek(0, 4) == b"okok"


def _recv_until_eof(sock, limit: int = 1 << 16) -> bytes:
    out = bytearray()
    while len(out) < limit:
        try:
            chunk = sock.recv(limit - len(out))
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _recv_exact(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def test_real_server_framing_is_what_our_codec_speaks(real_engine, metadata):
    """Raw bytes against the real data port: the facts ``reference_engine.transport.wire`` encodes."""
    host, port = _real_descriptor(metadata, real_engine).data_endpoint()
    buf = real_engine.buffer
    ok, rej = wire.STATUS_OK_FRAME, wire.STATUS_REJECTED_FRAME
    with socket.create_connection((host, port), timeout=10) as s:
        garbage_padding = wire.encode_header(wire.WRITE, buf + 200, 4)[:17] + b"\xa5" * 7
        s.sendall(
            garbage_padding
            + b"wire"
            + wire.encode_header(wire.READ, buf + 200, 4)
            + wire.encode_header(wire.WRITE, buf + 204, 2)
            + b"!!"
            + wire.encode_header(wire.READ, buf + 200, 6)
        )
        assert _recv_exact(s, 8 + 12 + 8 + 14) == ok + ok + b"wire" + ok + ok + b"wire!!"
        s.sendall(wire.encode_header(wire.READ, buf, 0))  # size 0 is not a valid range
        assert _recv_until_eof(s) == rej
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(wire.encode_header(wire.WRITE, buf, 3, proto_version=1) + b"v1!")
        s.sendall(wire.encode_header(wire.READ, buf, 3, proto_version=1))
        assert _recv_exact(s, 3) == b"v1!"  # v1: no status frames at all
