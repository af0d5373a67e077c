"""The engine process: memory, publication, transfers through the cache, control channel."""

from reference_engine.engine.core import ENGINE_COUNTERS, Engine, Outcome

__all__ = ["ENGINE_COUNTERS", "Engine", "Outcome"]
