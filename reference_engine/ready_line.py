"""The one JSON line a reference process prints on stdout once it serves (``{"event": "ready",
...}``), which the harness reads from the process's log.

Written with a single ``write`` and flushed: ``print`` writes the text and its newline
separately, and where stdout writes through (a forked child of the harness's fork server, or
``PYTHONUNBUFFERED``) a log line from another thread of the process, sharing the log file,
could land between them and glue itself onto the ready line (seen at ``-n 4``: "Extra data"
when the harness parsed it)."""

from __future__ import annotations

import json
import sys
from typing import Any


def print_ready(**fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": "ready", **fields}) + "\n")
    sys.stdout.flush()
