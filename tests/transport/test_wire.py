"""The session header and status frames, byte for byte as Mooncake lays them out."""

import pytest

from reference_engine.transport import wire


def test_header_is_24_bytes_little_endian_with_v2_flag():
    h = wire.encode_header(wire.WRITE, addr=0x1122334455667788, size=0x10)
    assert len(h) == 24
    assert h[:8] == (0x10).to_bytes(8, "little")
    assert h[8:16] == bytes.fromhex("8877665544332211")
    assert h[16] == 0x81
    assert h[17:] == bytes(7)


def test_v1_header_has_no_flag_and_read_is_zero():
    assert wire.encode_header(wire.READ, 1, 1, proto_version=1)[16] == 0x00
    assert wire.encode_header(wire.WRITE, 1, 1, proto_version=1)[16] == 0x01
    assert wire.encode_header(wire.READ, 1, 1)[16] == 0x80


def test_decode_ignores_padding_and_splits_flag():
    raw = wire.encode_header(wire.READ, 0xABC, 7)[:17] + b"\xff" * 7
    assert wire.decode_header(raw) == wire.Header(7, 0xABC, wire.READ, True)


def test_status_frames_carry_mctv_magic():
    assert wire.STATUS_OK_FRAME == b"\x00\x00\x00\x00VTCM"
    assert wire.STATUS_REJECTED_FRAME == b"\x01\x00\x00\x00VTCM"
    assert wire.status_is_frame(wire.STATUS_REJECTED)
    assert not wire.status_is_frame(int.from_bytes(b"AAAAAAAA", "little"))
    assert "v1" in wire.describe_status(0x4141414141414141)


@pytest.mark.parametrize("bad", [dict(addr=-1), dict(addr=1 << 64), dict(size=-5)])
def test_encode_rejects_values_outside_u64(bad):
    args = dict(addr=0, size=0) | bad
    with pytest.raises(ValueError):
        wire.encode_header(wire.READ, **args)


def test_encode_rejects_unknown_opcode():
    with pytest.raises(ValueError, match="opcode"):
        wire.encode_header(2, 0, 0)
