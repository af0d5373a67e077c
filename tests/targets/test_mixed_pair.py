"""A reference engine and a real 0.3.13 engine on one etcd: each reads the other's descriptor
and they transfer both ways, in both writer/reader roles."""

from __future__ import annotations

import json
import os

import pytest

from pytest_mooncake.targets import TargetContext, resolve_target


@pytest.fixture
def pair(mooncake_target, mc_etcd, tmp_path, request):
    reference = resolve_target("reference")
    reference.open(TargetContext(seed=7, workdir=tmp_path / "ref",
                                 etcd_endpoints=lambda: list(mc_etcd.endpoints)))
    (tmp_path / "ref").mkdir(exist_ok=True)
    ref_meta = reference.metadata_store("etcd")
    real_meta = mooncake_target.metadata_store("etcd")
    # Fresh names per test: 0.3.13 merges a killed predecessor's buffers into a new descriptor.
    tag = f"{os.getpid()}-{request.node.name}"
    ref = reference.start_engine(f"mix-ref-{tag}", ref_meta)
    real = mooncake_target.start_engine(f"mix-real-{tag}", real_meta)
    yield ref, real, real_meta
    real.kill()
    ref.kill()
    reference.close()


def test_descriptors_are_mutually_readable(pair):
    ref, real, meta = pair
    assert json.loads(meta.get(f"mooncake/ram/{ref.segment}"))["name"] == ref.segment
    assert real.lookup(ref.segment).ok
    assert ref.lookup(real.segment).ok


@pytest.mark.parametrize("writer", ["reference", "mooncake"])
def test_transfers_both_ways(pair, writer):
    ref, real, _ = pair
    src, dst = (ref, real) if writer == "reference" else (real, ref)
    payload = f"from-{writer}".encode()
    wrote = src.write(dst.segment, 128, payload)
    assert wrote.ok, wrote.error
    assert dst.local_read(128, len(payload)) == payload
    dst.local_write(4096, b"reader-" + payload)
    got = src.read(dst.segment, 4096, len(payload) + 7)
    assert got.ok, got.error
    assert got.data == b"reader-" + payload
