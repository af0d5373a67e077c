"""The descriptor codec against real and hand-written samples, and the malformed corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_engine.descriptor import (
    MAX_RAW_BYTES,
    Buffer,
    DescriptorError,
    SegmentDescriptor,
    decode,
    encode,
    from_json,
    tcp_descriptor,
)

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "descriptors"
INDEX = json.loads((SAMPLES / "index.json").read_text())
VALID = [v for v in INDEX["valid"] if v["segment"]]
MALFORMED = INDEX["malformed"]


@pytest.mark.parametrize("sample", VALID, ids=lambda v: v["file"])
def test_valid_sample_round_trips_byte_for_byte(sample):
    raw = (SAMPLES / sample["file"]).read_bytes()
    desc = decode(raw, sample["segment"])
    assert desc.name == sample["segment"]
    assert encode(desc) == raw


def test_real_0_3_13_value_decodes_to_the_release_form():
    desc = decode((SAMPLES / "tcp-0.3.13-etcd.json").read_bytes(), "real")
    assert desc.protocol == "tcp"
    assert desc.tcp_data_host == "127.0.0.1" and desc.rdma_server_name == ""
    assert desc.tcp_proto_version == 2 and desc.data_endpoint() == ("127.0.0.1", 15688)
    assert desc.is_legacy
    assert [(b.addr, b.length) for b in desc.buffers] == [(140585143889936, 1 << 20)]


def test_source_form_names_no_data_host_and_the_segment_name_is_not_taken_for_one():
    """0.3.11/0.3.12 (and the source tree) publish no tcp_data_host: where the data port is
    comes from the segment's RPC entry (tests/engine/test_peer_locations.py), never from the
    segment name, which need not be a host at all."""
    desc = decode((SAMPLES / "tcp-source-form.json").read_bytes())
    assert desc.tcp_data_host is None and desc.rdma_server_name is None
    with pytest.raises(LookupError, match="publishes no tcp_data_host"):
        desc.data_endpoint()


def test_rdma_sample_keeps_keys_per_device():
    desc = decode((SAMPLES / "rdma-source-form.json").read_bytes())
    assert [d.name for d in desc.devices] == ["mlx5_0", "mlx5_1"]
    assert desc.buffers[0].rkey == (1234, 1235) and desc.buffers[1].rkey == ()
    assert desc.priority_matrix["cpu:0"] == (("mlx5_0", "mlx5_1"), ())


def test_unknown_keys_are_kept():
    desc = decode((SAMPLES / "tcp-unknown-keys.json").read_bytes())
    assert desc.extra["future_field"] == {"nested": [1, 2, {"x": "y"}]}
    assert desc.buffers[0].extra == {"shm_name": "x"}


def test_instance_id_is_read_and_written():
    desc = decode((SAMPLES / "tcp-release-form-with-instance-id.json").read_bytes())
    assert desc.instance_id and not desc.is_legacy


@pytest.mark.parametrize("sample", MALFORMED, ids=lambda v: v["file"])
def test_malformed_sample_is_rejected_naming_segment_and_field(sample):
    raw = (SAMPLES / sample["file"]).read_bytes()
    with pytest.raises(DescriptorError) as err:
        decode(raw, "seg-under-test")
    assert err.value.segment == "seg-under-test"
    assert err.value.field == sample["field"], str(err.value)
    assert "seg-under-test" in str(err.value) and sample["field"] in str(err.value)


RELEASE_DOC = json.loads((SAMPLES / "tcp-0.3.13-etcd.json").read_bytes())
RDMA_DOC = json.loads((SAMPLES / "rdma-source-form.json").read_bytes())


@pytest.mark.parametrize(("field", "edges", "past"), [
    ("tcp_data_port", (0, 65535), (-1, 65536)),
    ("tcp_proto_version", (0, 1 << 16), (-1, (1 << 16) + 1)),
])
def test_data_port_and_proto_version_are_read_at_their_edges_and_refused_past_them(
        field, edges, past):
    """The reference's own ranges (Mooncake's decoder reads both with asInt, unchecked; no
    requirement names a range): each edge is read as written, one past it is refused by name."""
    for value in edges:
        assert getattr(from_json(dict(RELEASE_DOC, **{field: value}), "s"), field) == value
    for value in past:
        with pytest.raises(DescriptorError, match="is outside") as err:
            from_json(dict(RELEASE_DOC, **{field: value}), "s")
        assert err.value.field == field, str(err.value)


def test_an_instance_id_of_128_characters_is_read_and_one_of_129_refused():
    longest = "f" * 128
    assert from_json(dict(RELEASE_DOC, instance_id=longest), "s").instance_id == longest
    with pytest.raises(DescriptorError, match="longer than 128") as err:
        from_json(dict(RELEASE_DOC, instance_id=longest + "f"), "s")
    assert err.value.field == "instance_id"


@pytest.mark.parametrize(("lkey", "said"), [([1234], "2 rkeys but 1 lkeys"),
                                            (None, "2 rkeys but 0 lkeys")])
def test_rkeys_unlike_lkeys_are_refused_naming_both_counts(lkey, said):
    """A buffer with two rkeys and one lkey, or none at all (no lkey key): a DescriptorError
    that names the field and both counts, never another exception."""
    first = {k: v for k, v in RDMA_DOC["buffers"][0].items() if k != "lkey"}
    if lkey is not None:
        first["lkey"] = lkey
    doc = dict(RDMA_DOC, buffers=[first, *RDMA_DOC["buffers"][1:]])
    with pytest.raises(DescriptorError) as err:
        from_json(doc, "s")
    assert err.value.field == "buffers[0].rkey" and said in str(err.value), str(err.value)


def test_the_size_limit_is_checked_before_parsing():
    with pytest.raises(DescriptorError, match="exceed the limit") as err:
        decode(b" " * (MAX_RAW_BYTES + 1), "s")
    assert err.value.field == "<raw>"


def test_descriptors_are_immutable():
    desc = decode((SAMPLES / "tcp-0.3.13-etcd.json").read_bytes())
    with pytest.raises(AttributeError):
        desc.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        desc.extra["x"] = 1  # type: ignore[index]


def test_same_resources_ignores_timestamp_and_proto_version_only():
    a = tcp_descriptor("s", [(4096, 4096)], "127.0.0.1", 1000, "id1")
    b = SegmentDescriptor(**{**a.__dict__, "timestamp": "x", "tcp_proto_version": 1})
    c = SegmentDescriptor(**{**a.__dict__, "instance_id": "id2"})
    assert a.same_resources(b) and not a.same_resources(c)


_buffers = st.lists(
    st.tuples(st.integers(1, 1 << 20), st.integers(1, 1 << 16)), min_size=0, max_size=5
).map(lambda spans: _disjoint(spans))


def _disjoint(spans):
    out, at = [], 4096
    for gap, length in spans:
        at += gap
        out.append(Buffer(name="cpu:0", addr=at, length=length))
        at += length
    return tuple(out)


descriptors = st.builds(
    SegmentDescriptor,
    name=st.text(min_size=1, max_size=30),
    protocol=st.just("tcp"),
    buffers=_buffers,
    tcp_data_host=st.none() | st.just("127.0.0.1"),
    tcp_data_port=st.none() | st.integers(0, 65535),
    tcp_proto_version=st.none() | st.integers(1, 2),
    rdma_server_name=st.none() | st.just(""),
    timestamp=st.none() | st.text(max_size=30),
    instance_id=st.none() | st.text("0123456789abcdef", min_size=32, max_size=64),
)


@settings(max_examples=200, deadline=None)
@given(descriptors)
def test_generated_descriptors_round_trip(desc):
    assert decode(encode(desc), "gen") == desc
    assert decode(encode(desc, newline=False), "gen") == desc


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_anything_but_descriptor_error(raw):
    try:
        decode(raw, "fuzz")
    except DescriptorError as exc:
        assert exc.segment == "fuzz"
