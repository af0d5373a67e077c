"""The reference engine's log lines (reference_engine/cache.py, cache_policies.py,
engine/core.py) as counters, for ``log_events``."""

from pytest_mooncake.targets.log_events import rule

RULES = (
    rule("refresh_ok", r"\brefresh of \S+ ok"),  # debug level: absent from an info log
    rule("refresh_failed", r"\b(ordinary|forced) refresh of \S+ failed"),
    rule("refresh_forced", r"\bforced refresh of |forcing a refresh"),
    rule("snapshots_replaced", r"\bsnapshot of \S+ replaced"),
    rule("replacements", r"\breplacement of \S+ observed"),
    rule("endpoints_retired", r"\bretired connections of "),
    rule("retries_exhausted", r"\btransfer to \S+ failed after \d+ retries"),
)
