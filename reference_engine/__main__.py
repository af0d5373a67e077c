"""``python -m reference_engine COMMAND ...``: the reference engine's processes.

Each command lives in its own module, imported only when chosen.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "engine": ("reference_engine.engine.engine_main", "a transfer-engine process publishing one segment"),
    "metadata-server": ("reference_engine.metadata.metadata_server_main",
                        "an HTTP metadata server speaking Mooncake's API"),
    "master": ("reference_engine.master.master_main", "an HA store master (etcd election, OpLog)"),
    "client": ("reference_engine.master.store_client_main", "a store client mounting one segment"),
}


def usage() -> str:
    lines = ["usage: python -m reference_engine COMMAND [options]", "", "commands:"]
    lines += [f"  {name:16} {desc}" for name, (_, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
