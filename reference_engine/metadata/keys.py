"""Mooncake's key layout in the metadata store (mooncake-semantics.md 1.4)."""

from __future__ import annotations

import os
from dataclasses import dataclass

CLUSTER_ID_ENV = "MC_METADATA_CLUSTER_ID"


@dataclass(frozen=True)
class KeyLayout:
    """``mooncake/`` or ``mooncake/<cluster_id>/``, then ``ram/<segment>`` and ``rpc_meta/<name>``."""

    cluster_id: str = ""

    @classmethod
    def from_env(cls) -> KeyLayout:
        return cls(os.environ.get(CLUSTER_ID_ENV, ""))

    @property
    def prefix(self) -> str:
        if not self.cluster_id:
            return "mooncake/"
        cid = self.cluster_id if self.cluster_id.endswith("/") else self.cluster_id + "/"
        return "mooncake/" + cid

    def segment_key(self, segment: str) -> str:
        """A name containing ``/`` is used as is under the prefix, without ``ram/``."""
        return self.prefix + (segment if "/" in segment else "ram/" + segment)

    def rpc_meta_key(self, server_name: str) -> str:
        return self.prefix + "rpc_meta/" + server_name
