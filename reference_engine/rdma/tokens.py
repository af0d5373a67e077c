"""Per-post completion tokens (RFC CO-2, CO-3): what a WR's ``wr_id`` names under ``rfc``.

Tokens come from a pool and are reused; ``wr_id`` = (epoch << 24) | index, and the epoch
advances on every release, so a completion that arrives after its token was already released
(e.g. by a forced reclaim) and reused cannot be mistaken for the new owner's.
"""

from __future__ import annotations

import threading

from reference_engine.rdma.counters import Counter

INDEX_BITS = 24
INDEX_MASK = (1 << INDEX_BITS) - 1


class PostToken:
    __slots__ = ("index", "wr_id", "slice", "endpoint", "generation", "attempt", "qp_depth",
                 "cq_outstanding")

    def __init__(self, index: int):
        self.index = index
        self.wr_id = (1 << INDEX_BITS) | index
        self.slice = None
        self.endpoint = None
        self.generation = 0
        self.attempt = 0
        self.qp_depth: Counter | None = None
        self.cq_outstanding: Counter | None = None


class TokenPool:
    """A free list of tokens; ``live`` maps index -> token for tokens posted and not released."""

    def __init__(self, initial: int = 0):
        self.tokens: list[PostToken] = [PostToken(i) for i in range(initial)]
        self.free: list[PostToken] = list(reversed(self.tokens))
        self.live: dict[int, PostToken] = {}
        self._grow = threading.Lock()

    def acquire(self, slice, endpoint, qp_depth: Counter, cq_outstanding: Counter) -> PostToken:
        free = self.free
        if free:
            tok = free.pop()
        else:
            with self._grow:
                tok = PostToken(len(self.tokens))
                self.tokens.append(tok)
        tok.slice = slice
        tok.endpoint = endpoint
        tok.generation = endpoint.generation
        tok.attempt = slice.attempt
        tok.qp_depth = qp_depth
        tok.cq_outstanding = cq_outstanding
        self.live[tok.index] = tok
        return tok

    def lookup(self, wr_id: int) -> PostToken | None:
        tok = self.live.get(wr_id & INDEX_MASK)
        if tok is None or tok.wr_id != wr_id:
            return None
        return tok

    def release(self, tok: PostToken) -> bool:
        """Release the token's counters exactly once; False if it was already released."""
        if self.live.pop(tok.index, None) is None:
            return False
        tok.qp_depth.add(-1)
        tok.cq_outstanding.add(-1)
        tok.wr_id = (((tok.wr_id >> INDEX_BITS) + 1) << INDEX_BITS) | tok.index
        tok.slice = None
        tok.endpoint = None
        self.free.append(tok)
        return True

    def outstanding(self) -> int:
        return len(self.live)
