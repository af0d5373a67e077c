"""Real etcd for tests (placeholder; being written)."""
