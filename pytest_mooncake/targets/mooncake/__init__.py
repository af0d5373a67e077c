"""The Mooncake family: real Mooncake builds under test, as one adapter over placements.

- ``adapter.py``: ``MooncakeFamilyTarget``, the one Target (options, capabilities, factories);
  ``option_rules.py``: which options exist and how an unhonoured one is refused;
- placements (``adapter.Placement``; ``process_placement.py`` is the shared part of those
  that start processes): ``local_placement.py`` (``mooncake``: an installed build's
  processes on this host), ``docker_placement.py`` (``docker:IMAGE``: containers),
  ``deployment_placement.py`` (``cluster:FILE``: an existing deployment; manifest in
  ``schemas/cluster_manifest.py``);
- components: ``driver.py`` (the driver process, run with the build's python),
  ``driver_control.py`` (its control channel), ``driver_engines.py`` (engine handles),
  ``store_clients.py`` (the store-client launcher), ``master_processes.py`` (HA masters this
  family starts), ``master_admins.py`` (the one reading of mooncake_master's admin service:
  health, leader, promotability, keys, metrics, segments), ``admin_http.py`` (its HTTP client),
  ``metadata_stores.py`` (etcd and HTTP metadata), ``launchers.py`` (how a process is started:
  this host or a container), ``install.py`` (where a build lives).
"""
