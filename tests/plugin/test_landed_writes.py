"""The suites' landed-write check (pytest_mooncake/landed_writes.py): a write acknowledged before
its bytes land (TCP protocol v1, Mooncake 0.3.10/0.3.11) still counts once they do, and every
other outcome says what was seen. The engines are stand-ins of one class each (a unit test)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_mooncake.landed_writes import must_land, write_seen


@dataclass
class Result:
    ok: bool
    error: str | None = None


@dataclass
class Peer:
    """Shows the bytes of an acknowledged write only after ``late`` reads of its buffer."""

    segment: str = "seg-a"
    late: int = 0
    never: bool = False
    buffer: bytes = b""
    reads: int = 0
    pending: bytes = field(default=b"")

    def buffers(self):
        return [(0x1000, 4096)]

    def local_read(self, offset: int, length: int) -> bytes:
        self.reads += 1
        if self.pending and not self.never and self.reads > self.late:
            self.buffer, self.pending = self.pending, b""
        return self.buffer[offset:offset + length].ljust(length, b"\0")


@dataclass
class Writer:
    peer: Peer
    fail: str | None = None
    segment: str = "seg-b"

    def write_at(self, segment: str, address: int, data: bytes) -> Result:
        assert (segment, address) == (self.peer.segment, 0x1000)
        if self.fail:
            return Result(False, self.fail)
        self.peer.pending = data
        return Result(True)


def test_bytes_that_land_after_the_acknowledgement_count():
    peer = Peer(late=3)
    assert write_seen(Writer(peer), peer, b"before-the-kill!") is None
    assert peer.reads > 3, "the check read the buffer once and gave up"


def test_bytes_that_never_land_are_reported_with_what_the_buffer_held():
    peer = Peer(never=True)
    seen = write_seen(Writer(peer), peer, b"payload", lands_s=0.2)
    assert seen is not None and "was acknowledged, but" in seen and "b'\\x00" in seen, seen
    with pytest.raises(AssertionError, match="before the scenario's fault.*acknowledged, but"):
        must_land(Writer(peer), peer, b"payload")


def test_a_failed_write_is_reported_with_its_error():
    peer = Peer()
    seen = write_seen(Writer(peer, fail="returned -1"), peer, b"payload")
    assert seen == "seg-b's write of b'payload' to seg-a at 0x1000 failed: returned -1"
