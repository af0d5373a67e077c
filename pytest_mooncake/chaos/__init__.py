"""Chaos runs in Jepsen's spirit: workload generators, a nemesis, a runner, a history, checkers.

The pieces are target-agnostic: a *client* turns generated ops into calls on whatever is under
test, a *fault* is a pair of callables (inject, heal), and checkers read only the history.
"""
