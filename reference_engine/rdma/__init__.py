"""The reference engine's RDMA path: a verbs layer (pyverbs for real RNICs), endpoints and
stores, a worker pool with completion ownership (CO RFC) and replacement recovery (MR RFC
stage 3). ``rfc`` and ``legacy`` differ only in the strategies of ``rdma_policies``, which the
profile registry (``reference_engine.profiles``) hands to the transport.

Modules, one concept each:

- ``verbs``: the interface (enums with libibverbs values, WorkRequest/WorkCompletion, protocols);
  ``pyverbs_backend``: real RNICs.
- ``endpoint``: an endpoint (generation, postable flag, counters, handshake, post, two-phase
  destroy); ``endpoint_store``: FIFO / SIEVE stores, the one ``retire`` path, ``reclaim``.
- ``slices`` (slices, tasks, the legacy slice table), ``tokens`` (per-post tokens),
  ``counters``, ``rail_state``, ``peer_state`` (instance tracking), ``config`` (``MC_*``).
- ``context`` (a local NIC), ``worker_pool`` (post and completion steps), ``rdma_transport``
  (slicing, path selection, retry, handoff, replacement, async events, reclaim, threads).
- ``handshake_rpc``: the handshake as Mooncake frames it over TCP.
- ``rdma_policies``: ownership, retirement, worker model and peer tracking strategies.
- ``points`` (the named points worker steps yield), ``clock`` (the clock interface, real time).

``sim/`` is the simulation harness around this code (simulated verbs, the controlled scheduler,
scenarios, invariants, exploration); nothing here imports it. CLI in ``__main__``.

Worker steps are generators yielding named points: the scheduler drives them cooperatively on one
thread (exact interleavings, replayable), ``RdmaTransport.start()`` runs the same generators in
real threads where a point costs one generator resume.
"""

import logging

logging.getLogger("reference_engine.rdma").addHandler(logging.NullHandler())
