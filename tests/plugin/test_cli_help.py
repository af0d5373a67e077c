"""Every flag of every command-line tool the project ships has help text, and every tool
answers ``--help`` (``mc-toxiproxy --help`` is the model). The parser of each tool is taken from
its own ``main`` (argparse's ``parse_args`` is intercepted), so a new flag without help fails
here wherever it is added."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TOOLS: dict[str, str] = {
    "python -m reference_engine engine": "reference_engine.engine.engine_main",
    "python -m reference_engine master": "reference_engine.master.master_main",
    "python -m reference_engine client": "reference_engine.master.store_client_main",
    "python -m reference_engine metadata-server": "reference_engine.metadata.metadata_server_main",
    "python -m reference_engine.rdma": "reference_engine.rdma.__main__",
    "mc-toxiproxy": "pytest_mooncake.toxiproxy.__main__",
    "python -m pytest_mooncake.verbs": "pytest_mooncake.verbs.cli",
    "python -m pytest_mooncake.releases": "pytest_mooncake.releases.__main__",
    "python -m pytest_mooncake.cluster": "pytest_mooncake.cluster.__main__",
    "python -m pytest_mooncake.lab": "pytest_mooncake.lab.__main__",
    "python -m pytest_mooncake.report": "pytest_mooncake.report.__main__",
    "scripts/generate_expectations.py": "scripts/generate_expectations.py",
    "python -m pytest_mooncake.report html": "pytest_mooncake.report.dashboard",
    "scripts/judge_mooncake.py": "scripts/judge_mooncake.py",
    "scripts/mutants.py": "scripts/mutants.py",
    "scripts/check_suite_isolation.py": "scripts/check_suite_isolation.py",
    "scripts/wheel_check.py": "scripts/wheel_check.py",
}


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _main_of(where: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], object]:
    if where.endswith(".py"):
        monkeypatch.syspath_prepend(str(ROOT / "scripts"))
        spec = importlib.util.spec_from_file_location(Path(where).stem, ROOT / where)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(spec.name, module)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return module.main


def _parser_of(where: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    def intercept(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", intercept)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", intercept)
    with pytest.raises(_Parsed) as caught:
        _main_of(where, monkeypatch)(["--help"])
    return caught.value.parser


def _undocumented(parser: argparse.ArgumentParser, prog: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for sub, subparser in action.choices.items():
                if sub not in helped:
                    yield f"{prog} {sub}: no help line in the command list"
                yield from _undocumented(subparser, f"{prog} {sub}")
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            yield f"{prog} {name}: no help"


@pytest.mark.parametrize("tool", list(TOOLS))
def test_every_flag_has_help(tool: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser_of(TOOLS[tool], monkeypatch)
    missing = list(_undocumented(parser, tool))
    assert not missing, "flags without help:\n  " + "\n  ".join(missing)
    assert parser.description, f"{tool}: no description in --help"


def test_mc_target_help_names_every_target_kind(pytester: pytest.Pytester) -> None:
    from pytest_mooncake.targets import KNOWN_TARGETS

    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    start = text.index("--mc-target=NAME[:VARIANT]")
    help_text = text[start:text.index("--mc-etcd=", start)]
    for kind in KNOWN_TARGETS:
        assert f"{kind} (" in help_text, f"--mc-target's help does not name {kind}: {help_text}"
    assert "cluster:example" in help_text and "docker:IMAGE" in help_text
