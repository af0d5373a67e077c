"""``python -m pytest_mooncake.report COMMAND ...``: stored JSON reports, without a run.

A small dispatcher: each command is a module with ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` listed in ``COMMANDS``; adding one is a module and a line.
Exit statuses are the command's own (docs/ci.md); 2 is a usage error or a file that cannot be
read, as argparse's own.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pytest_mooncake.report.command_errors import CommandError

COMMANDS = {
    "diff": "pytest_mooncake.report.report_diff",
    "merge": "pytest_mooncake.report.report_merge",
    "check": "pytest_mooncake.report.report_check",
    "update": "pytest_mooncake.report.report_update",
    "html": "pytest_mooncake.report.dashboard",
    "failures": "pytest_mooncake.report.report_failures",
    "agree": "pytest_mooncake.report.report_agreement",
}
"""Command name -> module."""

EXIT_USAGE = 2


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m pytest_mooncake.report",
                                  description="Compare, assemble and judge --mc-report files.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        cmd.set_defaults(handler=module.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from pytest_mooncake.report.expectations import ExpectationError
    from pytest_mooncake.report.report_columns import ReportError

    try:
        return int(args.handler(args))
    except (CommandError, ReportError, ExpectationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
