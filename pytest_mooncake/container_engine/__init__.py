"""Container engines for the ``docker`` target and the image builder: a Docker-API engine found
or started (Podman, configured for this kind of host), the session's objects labelled and removed
even when pytest is SIGKILLed (``keeper``), and the run's networks in 198.18.0.0/15."""
