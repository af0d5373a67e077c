"""struct_pack encoding against bytes the releases produced (captured from 0.3.14's master) and
against yalantinglibs' own rules (type_calculate.hpp, calculate_size.hpp)."""

from __future__ import annotations

import pytest

from pytest_mooncake.master_rpc import frame, type_literal
from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc.client import decode_answer
from pytest_mooncake.master_rpc.layouts import LAYOUTS, PING_RESPONSE, UUID, expected

SERVICE_READY_0_3_14 = bytes.fromhex("35ccb31c0487800c01000105322e302e30")
"""0.3.14's answer to ServiceReady: hash, metainfo 0x04 (literal follows), the literal of
expected<string, ErrorCode> (87 80 0c 01 NUL), has_value, size 5, "2.0.0"."""


def test_a_release_answer_decodes_with_its_literal_matching_the_declared_type():
    answer = decode_answer("ServiceReady", expected(sp.STR), SERVICE_READY_0_3_14)
    assert answer.value == "2.0.0"
    assert answer.literal == bytes.fromhex("87800c01") and answer.matches_layout is True


def test_the_hash_is_the_md5_head_of_the_literal_with_the_low_bit_cleared():
    assert sp.types_code(expected(sp.STR)) == 0x1CB3CC34


def test_the_uuid_is_a_trivial_pair_whose_literal_carries_its_alignment():
    assert UUID.literal() == bytes([253, 4, 4, 0x89, 0x89, 255])
    data = sp.serialize(UUID, (1, 2))
    assert data[4:] == (1).to_bytes(8, "little") + (2).to_bytes(8, "little")
    assert data[:4] == sp.types_code(UUID).to_bytes(4, "little")


@pytest.mark.parametrize("n, expected_bytes", [(0, b"\x81"), (8, b"\x89"), (126, b"\xff"),
                                               (127, b"\x01\x82"), (300, b"\x2f\x83")])
def test_size_literals_are_base_127_with_the_last_digit_marked(n, expected_bytes):
    assert sp.size_literal(n) == expected_bytes


def test_several_arguments_are_one_tuple_struct():
    args = sp.args_type((sp.STR, sp.BOOL, sp.STR))
    assert args.literal() == bytes([253, 128, 12, 11, 128, 12, 255])
    data = sp.serialize(args, ["k", True, "default"])
    assert data[4:] == b"\x01k\x01\x07default"


def test_a_container_of_256_or_more_widens_every_size_prefix_and_says_so_in_the_metainfo():
    args = sp.args_type((sp.STR, sp.STR))
    data = sp.serialize(args, ["x" * 300, "y"])
    code = int.from_bytes(data[:4], "little")
    assert code & 1 and data[4] == 0b01000
    assert data[5:7] == (300).to_bytes(2, "little") and data[307:309] == b"\x01\x00"
    assert sp.deserialize(args, data) == {"arg0": "x" * 300, "arg1": "y"}


def test_a_sent_type_literal_is_nul_terminated_after_the_metainfo():
    data = sp.serialize(expected(sp.BOOL), True, type_literal=True)
    assert data[4] == 0b100 and data[5:10] == bytes([135, 11, 1, 0, 1])


def test_a_trivial_struct_is_its_memory_image_with_padding():
    pair = sp.Struct("p", (("a", sp.U8), ("b", sp.U64)), refl=False)
    assert pair.size == 16
    data = sp.serialize(pair, {"a": 7, "b": 9})
    assert data[4:] == b"\x07" + bytes(7) + (9).to_bytes(8, "little")
    assert sp.deserialize(pair, data) == {"a": 7, "b": 9}


def test_compatible_members_after_the_payload_are_left_undecoded():
    body = sp.serialize(sp.STR, "ab")
    total = len(body) + 1 + 2 + 3
    tail = b"\x01\x05\x00"
    data = ((int.from_bytes(body[:4], "little") | 1).to_bytes(4, "little") + b"\x01"
            + total.to_bytes(2, "little") + body[4:] + tail)
    assert sp.deserialize(sp.STR, data) == "ab"
    assert sp.compatible_tail(data, sp.STR) == tail


def test_a_wrong_hash_is_refused_naming_both_types():
    with pytest.raises(sp.StructPackError, match="is not bool's"):
        sp.deserialize(sp.BOOL, sp.serialize(sp.STR, "x"))


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.name)
def test_every_declared_type_parses_back_from_its_literal(layout):
    for call in layout.calls.values():
        for t in (*call.args, call.answer):
            if t is not None:
                assert type_literal.parse(t.literal()).literal() == t.literal(), call.method


def test_an_answer_described_only_by_its_literal_decodes_positionally():
    data = sp.serialize(expected(PING_RESPONSE), {"view_version_id": 5,
                                                  "client_status": "OK"}, type_literal=True)
    answer = decode_answer("Ping", None, data)
    assert answer.value == {"f0": 5, "f1": 1}


def test_function_ids_are_the_md5_head_of_the_qualified_handler_name():
    assert frame.function_id("Ping") == sp.hash32(b"mooncake::WrappedMasterService::Ping")
    head = frame.request(3, "Ping", b"xy")
    assert head[:4] == bytes([21, 0, 0, 0]) and head[4:8] == (3).to_bytes(4, "little")
    assert head[12:16] == (2).to_bytes(4, "little") and head[20:] == b"xy"


def test_compatible_members_go_after_the_payload_with_the_whole_length_announced():
    from pytest_mooncake.master_rpc.layouts import SEGMENT_0_3_12, SEGMENT_0_3_14

    segment = {"id": (1, 2), "name": "s", "base": 3, "size": 4, "te_endpoint": "e",
               "protocol": "tcp", "host_id": ""}
    plain = sp.serialize(SEGMENT_0_3_12, segment, type_literal=True)
    late = sp.serialize(SEGMENT_0_3_14, segment, type_literal=True)
    assert SEGMENT_0_3_14.literal() == SEGMENT_0_3_12.literal()
    assert late[4] == plain[4] | 0b01, "metainfo: a 2-byte whole-message length follows"
    assert int.from_bytes(late[5:7], "little") == len(late)
    assert late[7:-1] == plain[5:] and late[-1:] == b"\x00", "payload, then one absent member"
    assert sp.deserialize(SEGMENT_0_3_14, late)["compatible_1"] is None
    assert sp.deserialize(SEGMENT_0_3_12, late)["name"] == "s", "an older reader skips it"
