"""Data transports of the reference engine. ``tcp``: Mooncake's TCP transport protocol."""

from .errors import PeerRejectedError, ProtocolError, TransferConnectionError, TransferError
from .tcp import TcpTransport

__all__ = [
    "TcpTransport",
    "TransferError",
    "PeerRejectedError",
    "TransferConnectionError",
    "ProtocolError",
]
