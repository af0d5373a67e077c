"""Node replacement end to end with real processes and a real etcd (MR-9..MR-12, MR-16, MR-18).

Engine A publishes, engine B writes to it, A is killed and restarted under the same name (with
new or with identical addresses); B's next transfer detects the new instance under ``rfc`` and
keeps the stale view under ``legacy``, as its counters and results show.
"""

from __future__ import annotations

import pytest

from pytest_mooncake.targets.reference.engines import ReferenceEngines


@pytest.fixture
def parts(request, tmp_path):
    made = []

    def make(profile):
        etcd = request.getfixturevalue("mc_etcd")
        p = ReferenceEngines(tmp_path / profile, profile, lambda: etcd.endpoints)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.mark.parametrize("keep", [False, True], ids=["new-addresses", "same-addresses"])
@pytest.mark.parametrize("profile", ["rfc", "legacy"])
def test_peer_replacement_is_detected_or_missed_by_profile(parts, profile, keep, tmp_path):
    engines = parts(profile)
    md = engines.metadata_store("etcd")
    seg_a, seg_b = f"{tmp_path.name}-a", f"{tmp_path.name}-b"
    a = engines.start_engine(seg_a, md, buffer_size=1 << 16)
    b = engines.start_engine(seg_b, md, ttl_ms=60_000)
    assert b.write(seg_a, 0, b"before").ok
    old = a.descriptor()

    a.kill()
    a.restart(keep_addresses=keep)
    new = a.descriptor()
    assert (new["buffers"] == old["buffers"]) is keep
    assert (new["tcp_data_port"] == old["tcp_data_port"]) is keep
    if profile == "rfc":
        assert new["instance_id"] != old["instance_id"]
    else:
        assert "instance_id" not in new
    if keep:
        b.set_ttl_ms(0)  # identical resources: only a refresh can reveal the new instance

    out = b.write(seg_a, 0, b"after!")
    stats = b.stats()
    seen = b.lookup(seg_a).descriptor
    if profile == "rfc":
        assert out.ok, out
        assert a.local_read(0, 6) == b"after!"
        assert stats["replacements"] == 1
        assert seen["instance_id"] == a.instance_id
        if not keep:
            assert out.retries >= 1 and stats["refresh_forced"] >= 1
            assert stats["endpoints_retired"] >= 1
    else:
        assert stats["replacements"] == 0 and stats["metadata_fetches"] == 1
        assert stats["refresh_forced"] == 0
        assert seen["timestamp"] == old["timestamp"], "legacy keeps the stale snapshot"
        if keep:
            assert out.ok or b.write(seg_a, 0, b"after!").ok  # a dead pooled socket may fail once
            assert a.local_read(0, 6) == b"after!"
        else:
            assert not out.ok and out.retries == 0
            assert seen["tcp_data_port"] == old["tcp_data_port"] != new["tcp_data_port"]
    a.stop()
    b.stop()
    md.close()


def test_engines_over_the_reference_http_metadata_server(parts, tmp_path):
    engines = parts("rfc")
    md = engines.metadata_store("http")
    a = engines.start_engine("http-a", md)
    b = engines.start_engine("http-b", md, ttl_ms=60_000)
    assert md.uri.startswith("http://127.0.0.1:") and md.uri.endswith("/metadata")
    assert md.get(md.segment_key("http-a")) == a.raw_descriptor()
    assert b.write("http-a", 4, b"via http").ok
    assert b.read("http-a", 4, 8).data == b"via http"
    a.kill()
    a.restart()
    out = b.write("http-a", 4, b"again")
    assert out.ok and out.retries >= 1, out
    assert b.stats()["replacements"] == 1
    probe = b.write_at("http-a", 4096, b"x")
    assert not probe.ok and "PeerRejectedError" in probe.error, "outside A's buffer (MR-18)"
    assert b.stats()["retries_exhausted"] == 1
    a.stop()
    b.stop()
    md.close()
    assert not md.process.alive()
