"""The HA cluster of real ``mooncake_master`` processes and what is read from them: ``ha_processes.py`` (the HA
master cluster this family starts), ``admin_view.py`` (the one reading of the admin service),
``http_admin.py`` (its HTTP client), ``flags.py`` (how one build spells each setting, from its
own ``--help``), ``snapshot_requests.py`` (snapshots on request and restore, MP-9) and
``oplog_planting.py`` (entries planted in the OpLog the leader keeps in etcd); the clients
speaking mooncake_master's own RPC are ``targets/master_wire_clients.py`` (shared with the
reference target, whose masters answer that RPC too)."""
