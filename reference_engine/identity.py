"""Process incarnation identity (MR-7): one random ``instance_id`` per process.

128 bits from the OS CSPRNG, hex-encoded, made when this module is first imported and remade
in a forked child (a child is a new process and must not share its parent's identity). No
ordering, no clock meaning. Every segment this process publishes carries the same value.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Protocol

INSTANCE_ID_BYTES = 16


def new_instance_id() -> str:
    """A fresh identity; only ``process_instance_id`` should be published."""
    return secrets.token_hex(INSTANCE_ID_BYTES)


_instance_id = new_instance_id()


def _renew_after_fork() -> None:
    global _instance_id
    _instance_id = new_instance_id()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_after_fork)


def process_instance_id() -> str:
    """This process's identity, constant for its lifetime."""
    return _instance_id


Mint = Callable[[], str]


class IdentityPolicy(Protocol):
    """Whether a process publishes an ``instance_id`` (MR-7, MR-8), and which."""

    def instance_id(self, mint: Mint = process_instance_id) -> str | None:
        """What to publish; ``mint`` makes the identity (the process's own by default, a
        seeded one in a simulation), called only when one is published."""
        ...


class PublishInstanceId:
    """RFC: every descriptor carries the publishing process's incarnation."""

    def instance_id(self, mint: Mint = process_instance_id) -> str | None:
        return mint()


class NoInstanceId:
    """0.3.13: descriptors carry no ``instance_id``."""

    def instance_id(self, mint: Mint = process_instance_id) -> str | None:
        return None
