"""The reference engine's RDMA path: a verbs layer (simulated or pyverbs), endpoints and stores,
a worker pool with completion ownership (CO RFC), replacement recovery (MR RFC stage 3) and a
controlled scheduler. ``rfc`` and ``legacy`` are profiles (``profiles.py``).

Modules, one concept each:

- ``verbs``: the interface (enums with libibverbs values, WorkRequest/WorkCompletion, protocols);
  ``sim_verbs``: simulated NICs, nodes and fabric with fault rules; ``pyverbs_backend``: real RNICs.
- ``endpoint``: an endpoint (generation, postable flag, counters, handshake, post, two-phase
  destroy); ``endpoint_store``: FIFO / SIEVE stores, the one ``retire`` path, ``reclaim``.
- ``slices`` (slices, tasks, the legacy slice table), ``tokens`` (per-post tokens),
  ``counters``, ``rail_state``, ``peer_state`` (instance tracking), ``config`` (``MC_*``).
- ``context`` (a local NIC), ``worker_pool`` (post and completion steps), ``transport`` (slicing,
  path selection, retry, handoff, replacement, async events, reclaim, threads).
- ``profiles``: ownership, retirement, worker model and peer tracking strategies per profile.
- ``points``, ``clock``, ``scheduler`` (strategies, replay tokens), ``invariants`` (CO-9),
  ``sim_cluster``, ``scenarios`` (the RFC's interleavings), ``exploration``; CLI in ``__main__``.

Worker steps are generators yielding named points: the scheduler drives them cooperatively on one
thread (exact interleavings, replayable), ``RdmaTransport.start()`` runs the same generators in
real threads where a point costs one generator resume.
"""

import logging

logging.getLogger("reference_engine.rdma").addHandler(logging.NullHandler())
