"""The reference engine's RDMA path: a verbs layer (simulated or pyverbs), endpoints and stores,
a worker pool with completion ownership (CO RFC), replacement recovery (MR RFC stage 3) and a
controlled scheduler. ``rfc`` and ``legacy`` are profiles (``profiles.py``)."""
