"""``python -m pytest_mooncake.cluster``: operator commands on a cluster file's nodes (heal what a
killed run left behind, list the fault ledger, check SSH access). The cluster *target* lives in
``pytest_mooncake.targets``; this package only wraps ``pytest_mooncake.nodes`` for a shell."""
