"""Data transports of the reference engine. ``tcp``: Mooncake's TCP transport protocol."""

from .tcp import TcpTransport
from .transfer_errors import (
    PeerRejectedError,
    ProtocolError,
    TransferConnectionError,
    TransferError,
)

__all__ = [
    "TcpTransport",
    "TransferError",
    "PeerRejectedError",
    "TransferConnectionError",
    "ProtocolError",
]
