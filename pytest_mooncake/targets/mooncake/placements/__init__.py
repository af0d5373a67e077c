"""Where the family's components live: ``spawned.py`` (the shared part of the placements that
start processes themselves), ``this_host.py`` (``mooncake``: an installed build's processes on
this host), ``containers.py`` (``docker:IMAGE``: containers through a Docker-API engine) and
``existing_cluster.py`` (``cluster:FILE``: a deployment described by a cluster file)."""
