"""The releases whose masters the wire probe must round-trip (issue #30); a module of its own
because ``from conftest import ...`` finds whichever conftest was imported first in a run."""

WIRE_RELEASES = ("0.3.10.post2", "0.3.11.post1", "0.3.12.post1", "0.3.13.post1", "0.3.14")
