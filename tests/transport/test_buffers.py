"""The registered-buffer table decides what a peer may touch."""

import pytest

from reference_engine.transport.buffers import RegisteredBuffers


@pytest.fixture
def table():
    t = RegisteredBuffers()
    t.register(0x1000, bytearray(0x100))
    t.register(0x1100, bytearray(0x100))  # adjacent, separate buffer
    return t


def test_resolve_inside_one_buffer(table):
    v = table.resolve(0x10F0, 0x10)
    assert v is not None and len(v) == 0x10


@pytest.mark.parametrize(
    "addr,size",
    [
        (0x0FFF, 1),  # below the first
        (0x10F0, 0x11),  # runs off the end of the first
        (0x10FF, 2),  # spans two adjacent buffers: Mooncake wants one buffer to hold it
        (0x1200, 1),  # past the last
        (0x1000, 0),  # empty
        ((1 << 64) - 1, 2),  # wraps
    ],
)
def test_resolve_rejects(table, addr, size):
    assert table.resolve(addr, size) is None


def test_views_write_through(table):
    mem = bytearray(16)
    table.register(0x9000, memoryview(mem))
    table.resolve(0x9004, 2)[:] = b"hi"
    assert mem[4:6] == b"hi"


def test_overlap_is_refused_with_both_ranges_named(table):
    with pytest.raises(ValueError, match="overlaps registered"):
        table.register(0x10FF, bytearray(2))


def test_readonly_and_empty_refused(table):
    with pytest.raises(ValueError, match="read-only"):
        table.register(0x5000, b"abc")
    with pytest.raises(ValueError, match="length 0"):
        table.register(0x5000, bytearray())


def test_unregister(table):
    table.unregister(0x1000)
    assert table.resolve(0x1000, 1) is None
    assert table.resolve(0x1100, 1) is not None
    with pytest.raises(KeyError):
        table.unregister(0x1000)
