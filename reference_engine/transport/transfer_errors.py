"""Why a transfer failed: the peer refused the access, or the connection did not carry it."""

from __future__ import annotations


class TransferError(Exception):
    """A transfer did not complete. ``failures`` maps batch index -> error for batch calls."""

    def __init__(
        self,
        message: str,
        *,
        host: str = "",
        port: int = 0,
        remote_addr: int | None = None,
        length: int | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.host = host
        self.port = port
        self.remote_addr = remote_addr
        self.length = length
        self.index = index
        self.failures: dict[int, TransferError] = {}
        self.completed: int = 0


class PeerRejectedError(TransferError):
    """The peer answered with the rejection status: the range is outside its registered buffers."""


class TransferConnectionError(TransferError):
    """Connecting, sending or receiving failed, or the peer closed before answering.

    For a WRITE this means "unknown": the destination may hold part of the payload.
    """


class ProtocolError(TransferConnectionError):
    """The peer answered with something that is not a status frame (e.g. a v1-only server)."""


def batch_error(failures: dict[int, TransferError], completed: int, total: int) -> TransferError:
    """One exception for a batch: rejected only if every failed item was rejected."""
    first = failures[min(failures)]
    all_rejected = all(isinstance(e, PeerRejectedError) for e in failures.values())
    cls = PeerRejectedError if all_rejected else type(first)
    if not all_rejected and not issubclass(cls, TransferConnectionError):
        cls = TransferConnectionError
    err = cls(
        f"{len(failures)} of {total} transfers to {first.host}:{first.port} failed; "
        f"first (index {first.index}): {first}",
        host=first.host,
        port=first.port,
        remote_addr=first.remote_addr,
        length=first.length,
        index=first.index,
    )
    err.failures = dict(failures)
    err.completed = completed
    return err
