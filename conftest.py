"""Only what this repository's own test runs need."""

pytest_plugins = ["pytester"]
