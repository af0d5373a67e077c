"""``python -m pytest_mooncake.report COMMAND``: tools over ``--mc-report`` files.

Each command lives in its own module with ``add_arguments(parser)`` and ``run(args)``; this
file only lists them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

COMMANDS = {
    "html": ("pytest_mooncake.report.dashboard",
             "a static dashboard of one report, or of two with their diff"),
}
"""command -> (module, one-line help)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_mooncake.report",
                                     description="Tools over --mc-report files.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=summary, description=module.__doc__.split("\n\n")[0])
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
