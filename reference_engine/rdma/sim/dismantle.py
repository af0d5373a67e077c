"""Taking a finished simulation apart, so reference counting frees it at once.

A simulated cluster is a web of back-references (a context knows its transport, a pool its
context, an endpoint store's SIEVE list links both ways, a slice knows its task, a simulated NIC
its node and QPs). Left alone, each dropped cluster is cyclic garbage for the cycle collector,
which an exploration (thousands of clusters) pays for with about a sixth of its time.
``dismantle`` cuts those back-references of a run that is over; nothing may use the run's
objects afterwards.
"""

from __future__ import annotations

from typing import Any


def dismantle(cluster: Any, checker: Any = None, extra: tuple = ()) -> None:
    """Cut the cycles of ``cluster`` (a ``SimCluster``): its transports (also those of
    restarted processes ``checker`` watched), their contexts, pools and endpoint stores, the
    fabric's nodes and simulated NICs, the checker's slices and tasks, and ``extra`` objects."""
    transports = {id(p.transport): p.transport for p in cluster.peers.values()}
    if checker is not None:
        transports.update((id(t), t) for t in checker.transports)
    for tr in transports.values():
        for ctx in tr.contexts:
            store = ctx.store
            node = getattr(store.order, "head", None)
            while node is not None:
                node.prev, node = None, node.next
            store.__dict__.clear()
            if ctx.pool is not None:
                ctx.pool.__dict__.clear()
            ctx.verbs.__dict__.clear()
            ctx.__dict__.clear()
        tr.__dict__.clear()
    fabric = cluster.fabric
    for node in fabric.nodes.values():
        for nic in node.contexts.values():
            nic.__dict__.clear()
        node.__dict__.clear()
    fabric.__dict__.clear()
    if checker is not None:
        for s in checker.slices:
            s.task = None
        checker.__dict__.clear()
    for obj in extra:
        obj.__dict__.clear()
    cluster.__dict__.clear()
