"""mc_skew with real engines: each role's engine comes from that role's target, both on one
etcd; the reader reads what the writer's engine holds, for every pair of the shipped matrix."""

from __future__ import annotations

import pytest


@pytest.mark.mc_skew("metadata-rolling-upgrade")
def test_reader_reads_the_writers_buffer(mc_skew) -> None:
    writer_target, reader_target = mc_skew.target("writer"), mc_skew.target("reader")
    metadata = writer_target.metadata_store("etcd")
    writer = writer_target.start_engine("skew-writer", metadata)
    reader = reader_target.start_engine("skew-reader", reader_target.metadata_store("etcd"))
    payload = f"written by {mc_skew.implementation('writer').name}".encode()
    writer.local_write(0, payload)
    result = reader.read("skew-writer", 0, len(payload))
    assert result.ok, result.error
    assert result.data == payload
