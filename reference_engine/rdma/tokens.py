"""Per-post completion tokens (RFC CO-2, CO-3): what a WR's ``wr_id`` names under ``rfc``.

Tokens come from a pool and are reused; ``wr_id`` = (epoch << 24) | index, and the epoch
advances on every release, so a completion that arrives after its token was already released
(e.g. by a forced reclaim) and reused cannot be mistaken for the new owner's.

A release names the post it ends by its ``wr_id``, and ``live`` is keyed by ``wr_id``: the
release that takes the entry is that post's one release. A worker's completion and the
monitor's forced reclaim can both hold the token object; the one that loses, even after the
token went back to the pool and a later post took it again (same object, new ``wr_id``),
finds nothing to release, and what it read of the token is not its to act on.
"""

from __future__ import annotations

import threading

from reference_engine.rdma.counters import Counter

INDEX_BITS = 24


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
    """A free list of tokens; ``live`` maps wr_id -> token for tokens posted and not released."""

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
        self.live[tok.wr_id] = tok
        return tok

    def lookup(self, wr_id: int) -> PostToken | None:
        return self.live.get(wr_id)

    def release(self, tok: PostToken, wr_id: int) -> bool:
        """Release the counters of the post ``wr_id`` named, exactly once; False if that post
        was already released (the token may since belong to another post)."""
        if self.live.pop(wr_id, None) is None:
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
