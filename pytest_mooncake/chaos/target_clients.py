"""Ready-made chaos clients over the Target API, so wiring a target is a few lines.

``EngineTransferClient`` turns ``write``/``read`` ops on ``"<segment>/<slot>"`` keys into
transfers from one engine handle to its peers; final reads (``final=True``) read the peer's
own memory with ``local_read``, which is what ``transfers_reach_new_instance`` judges::

    a, b = mc_engine("A"), mc_engine("B")
    result = mc_chaos.run(
        lambda w: EngineTransferClient(b, peers={"A": a}),
        gen.transfers(["A"], slots=8), [engine_kill(a)], workers=1,
        final=gen.final_reads(gen.transfer_keys(["A"], 8), f="read"))
    result.check(transfers_reach_new_instance).assert_valid()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_mooncake.chaos.checkers import READ, WRITE
from pytest_mooncake.chaos.generator import OpSpec
from pytest_mooncake.chaos.runner import Outcome, fail, info, ok


class EngineTransferClient:
    """Transfers from ``source`` (an ``EngineHandle``) into fixed-size slots of peer
    segments. A failed write is ``info`` (part of it may have landed), a failed read ``fail``.
    Empty (all-zero) slots read as None. ``instance_of(segment)``, if given, names the
    incarnation that served an ok transfer. A peer given in ``peers`` is addressed in the buffer
    its current process registered (``buffers()``), as a user who read its new descriptor
    would; any other segment at its first buffer as the source resolves it."""

    def __init__(self, source: Any, peers: Mapping[str, Any] | None = None, slot_size: int = 64,
                 instance_of: Callable[[str], str | None] | None = None):
        self.source = source
        self.peers = dict(peers or {})
        self.slot_size = slot_size
        self.instance_of = instance_of

    def _where(self, key: str) -> tuple[str, int]:
        segment, _, slot = key.rpartition("/")
        if not segment or not slot.isdigit():
            raise ValueError(f"transfer key must be '<segment>/<slot>' (got {key!r})")
        return segment, int(slot) * self.slot_size

    def _encode(self, value: str) -> bytes:
        data = value.encode()
        if len(data) > self.slot_size:
            raise ValueError(f"value {value!r} does not fit a {self.slot_size}-byte slot")
        return data.ljust(self.slot_size, b"\0")

    @staticmethod
    def _decode(data: bytes | None) -> str | None:
        raw = (data or b"").rstrip(b"\0")
        if not raw:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return "0x" + raw.hex()  # garbage: checkers report it as never written

    def _instance(self, segment: str) -> str | None:
        return self.instance_of(segment) if self.instance_of is not None else None

    def invoke(self, spec: OpSpec) -> Outcome:
        segment, offset = self._where(spec.key)
        if spec.f == READ and spec.final and segment in self.peers:
            return ok(self._decode(self.peers[segment].local_read(offset, self.slot_size)))
        peer = self.peers.get(segment)
        if spec.f == WRITE:
            data = self._encode(spec.value)
            result = (self.source.write_at(segment, peer.buffers()[0][0] + offset, data)
                      if peer is not None else self.source.write(segment, offset, data))
            if result.ok:
                return ok(None, instance=self._instance(segment))
            return info(result.error or "write failed")
        if spec.f == READ:
            result = (self.source.read_at(segment, peer.buffers()[0][0] + offset, self.slot_size)
                      if peer is not None else self.source.read(segment, offset, self.slot_size))
            if result.ok:
                return ok(self._decode(result.data), instance=self._instance(segment))
            return fail(result.error or "read failed")
        return fail(f"EngineTransferClient does not do {spec.f!r}")
