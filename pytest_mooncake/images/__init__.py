"""Container images of Mooncake releases, built on this machine (no registry needed):
``python -m pytest_mooncake.images build 0.3.13.post1`` makes ``localhost/mooncake:0.3.13.post1``."""
