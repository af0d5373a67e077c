"""The store master: object index, segments, clients, OpLog replication through etcd,
standby state machine, snapshots, election and safe promotion.

One concept per module; ``node`` ties them into a master process (``master_main``: ``python -m
reference_engine master``), ``store_client`` is the store client library (``store_client_main``:
``python -m reference_engine client``). What differs between the profiles (``rfc``, ``legacy``)
is a strategy in ``master_policies``, chosen by the profile registry
(``reference_engine.profiles``).
"""
