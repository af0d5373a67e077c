"""One exception for a batch: which class it is and what it carries."""

from reference_engine.transport.transfer_errors import (
    PeerRejectedError,
    ProtocolError,
    TransferConnectionError,
    batch_error,
)


def _e(cls, i):
    return cls(f"item {i}", host="h", port=1, remote_addr=0x10 * i, length=4, index=i)


def test_all_rejected_is_a_rejection():
    err = batch_error({3: _e(PeerRejectedError, 3), 1: _e(PeerRejectedError, 1)}, 5, 7)
    assert type(err) is PeerRejectedError
    assert err.index == 1 and err.remote_addr == 0x10
    assert sorted(err.failures) == [1, 3] and err.completed == 5
    assert "2 of 7 transfers to h:1 failed" in str(err)


def test_any_connection_failure_makes_it_a_connection_error():
    err = batch_error({0: _e(PeerRejectedError, 0), 2: _e(TransferConnectionError, 2)}, 1, 3)
    assert type(err) is TransferConnectionError
    assert isinstance(err.failures[0], PeerRejectedError)


def test_protocol_error_is_kept_and_is_a_connection_error():
    err = batch_error({0: _e(ProtocolError, 0)}, 0, 1)
    assert type(err) is ProtocolError
    assert isinstance(err, TransferConnectionError)
