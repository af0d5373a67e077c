"""Every benchmark under tests/benchmarks/ imports: CI does not run them (speed belongs there, not
in tests), so a moved helper would otherwise break one silently until someone needs its numbers
(bench_verbs.py imported a ``wait_for`` bench_tcp.py no longer had)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("bench_*.py")), ids=lambda p: p.name)
def test_benchmark_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # benchmarks import each other by name
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # top level only: main() is not called
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"
