"""Mutation testing of the conformance suites (``python scripts/mutants.py``): the catalogue,\nthe runner, the report."""
