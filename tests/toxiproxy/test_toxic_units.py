"""Unit properties of single toxics and of address rules (no sockets)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_mooncake.toxiproxy.addresses import AddressPolicy
from pytest_mooncake.toxiproxy.errors import ApiError
from pytest_mooncake.toxiproxy.toxics import Latency, Slicer, ToxicAttributeError


@given(size=st.integers(1, 20_000), avg=st.integers(1, 500), var_frac=st.floats(0, 0.99),
       seed=st.integers(0, 2**32))
def test_slicer_cuts_cover_the_chunk_in_order_with_bounded_pieces(size, avg, var_frac,
                                                                  seed) -> None:
    var = int(avg * var_frac)
    cuts = Slicer(average_size=avg, size_variation=var).cuts(size, random.Random(seed))
    assert cuts[0][0] == 0 and cuts[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:], strict=False))
    assert all(0 < end - start <= avg + var for start, end in cuts)


def test_slicer_rejects_settings_that_would_never_finish() -> None:
    with pytest.raises(ToxicAttributeError, match="average_size >= 1"):
        Slicer.from_attributes({"delay": 5})
    with pytest.raises(ToxicAttributeError, match="size_variation < average_size"):
        Slicer.from_attributes({"average_size": 3, "size_variation": 3})


@given(latency=st.integers(0, 10_000), jitter=st.integers(0, 1_000), seed=st.integers(0, 99))
def test_latency_delay_stays_within_jitter(latency, jitter, seed) -> None:
    delay = Latency(latency=latency, jitter=jitter).delay(random.Random(seed))
    assert (latency - jitter) / 1000 <= delay <= (latency + jitter) / 1000


def test_update_keeps_attributes_not_given() -> None:
    base = Latency.from_attributes({"latency": 100, "jitter": 7})
    assert Latency.from_attributes({"jitter": 1}, base).attributes() == \
        {"latency": 100, "jitter": 1}


@pytest.mark.parametrize("address", ["127.0.0.1:1", "127.0.0.2:1", "localhost:1", "[::1]:1"])
def test_loopback_addresses_are_allowed(address) -> None:
    AddressPolicy().upstream(address)


@pytest.mark.parametrize("address", ["10.0.0.1:1", "0.0.0.0:1", "example.com:1", ":1",
                                     "[2001:db8::1]:1"])
def test_other_addresses_need_the_flag(address) -> None:
    with pytest.raises(ApiError, match="not a loopback address"):
        AddressPolicy().upstream(address)
    AddressPolicy(allow_non_loopback=True).upstream(address)
