"""The store master: object index, segments, clients, OpLog replication through etcd,
standby state machine, snapshots, election and safe promotion.

One concept per module; ``node`` ties them into a master process (``python -m reference_engine
master``), ``client`` is the store client library. Profiles (``rfc``, ``legacy``) are strategy
objects in ``profiles``.
"""
