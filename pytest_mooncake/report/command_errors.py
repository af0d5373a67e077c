"""The error a ``python -m pytest_mooncake.report`` command raises for wrong input.

Kept out of ``__main__``: run with ``-m``, that module is ``__main__``, and a command importing
``pytest_mooncake.report.__main__`` would get a second module with a second class that the
dispatcher's ``except`` does not catch (a traceback instead of ``error: ...``, exit 1 not 2).
"""

from __future__ import annotations


class CommandError(Exception):
    """A command's input is wrong (a file missing, no such column): message, exit 2."""
