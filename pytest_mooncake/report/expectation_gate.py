"""The session's exit status under ``--mc-expect``: 0 when every result is as expected.

pytest exits 1 when a test failed; with expectations a known FAIL is no reason to fail a CI job,
a change is. The gate replaces pytest's 0/1 (other statuses, e.g. interrupted or usage error,
stay): 1 when a mismatch fails the run (``expectations.Judgement.failing``), when a test that
names no requirement failed (no expectation covers it), or when a column without expectations
has a failing verdict; else 0. ``--mc-expect-update`` writes the files from the run instead and
then judges against what it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.report import report_columns
from pytest_mooncake.report.expectation_update import (
    leading_comments,
    updated_document,
    write_expectations,
)
from pytest_mooncake.report.expectations import (
    FAILING,
    KIND,
    REGRESSION,
    ExpectationError,
    Expectations,
    Judgement,
    check_catalogue,
    judge,
    load_expectations,
)
from pytest_mooncake.schemas.shipped_files import shipped_dir


@dataclass
class ExpectationGate:
    spec: str
    rootdir: Path
    strict: bool = False
    update: bool = False
    order: Any = str
    expectations: Expectations | None = None
    judgement: Judgement | None = None
    written: list[Path] = field(default_factory=list)
    unlabelled_failures: list[str] = field(default_factory=list)

    @classmethod
    def from_options(cls, spec: str, rootdir: Path, strict: bool, update: bool,
                     catalogue: Any) -> ExpectationGate:
        """Read the file now, so a bad file is a usage error before any test runs."""
        gate = cls(spec, rootdir, strict, update, catalogue.order)
        try:
            gate.expectations = load_expectations(spec, [rootdir])
        except ExpectationError as exc:
            if not (update and _is_path(spec)):
                raise pytest.UsageError(str(exc)) from None
            return gate  # --mc-expect-update creates the file
        try:
            check_catalogue(gate.expectations, catalogue)
        except ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
        return gate

    def check_columns(self, labels: list[str]) -> None:
        if self.expectations is not None:
            try:
                self.expectations.check_shape(labels)
                self.expectations.check_covers(labels, [self.rootdir])
            except ExpectationError as exc:
                raise pytest.UsageError(str(exc)) from None
        elif len(labels) > 1:
            raise pytest.UsageError(f"--mc-expect-update: {self.spec} does not exist; a matrix "
                                    f"run updates an existing [columns] file")

    def note_failure(self, nodeid: str) -> None:
        """A failed test that names no requirement: no expectation covers it."""
        if nodeid not in self.unlabelled_failures:
            self.unlabelled_failures.append(nodeid)

    def exit_status(self, doc: dict[str, Any], status: int) -> int:
        found = {label: column for label, column in report_columns.columns(doc).items()
                 if column.requirements}
        if not found:  # no test naming a requirement ran: nothing to judge or write
            self.judgement = Judgement()
            return status
        if self.update:
            self._update(found)
        assert self.expectations is not None
        self.judgement = judge(found, self.expectations)
        if status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            return status
        uncovered = [c for c in self.judgement.unchecked_columns
                     if any(e["verdict"] in FAILING for e in found[c].requirements.values())]
        fails = self.judgement.failing(self.strict) or self.unlabelled_failures or uncovered
        return int(pytest.ExitCode.TESTS_FAILED if fails else pytest.ExitCode.OK)

    def _update(self, found: dict[str, report_columns.Column]) -> None:
        old = self.expectations
        if old is None:  # a new one-target file
            column = next(iter(found.values()))
            path = Path(self.spec)
            write_expectations(path, updated_document(column, None, order=self.order))
            self.written.append(path)
        else:
            for label, column in found.items():
                target = old.for_column(label)
                if target is None:
                    continue
                path = self._writable(target.path)
                write_expectations(path, updated_document(column, target, order=self.order),
                                   leading_comments(target.path))
                self.written.append(path)
        self.expectations = load_expectations(self.spec if old is None else old.spec,
                                              [self.rootdir])

    def _writable(self, path: Path) -> Path:
        """A shipped file is not edited in place: its update goes to the project's own
        ``fixtures/expectations/NAME.toml``, which then wins over the shipped one."""
        if path.resolve().parent == shipped_dir(KIND).resolve():
            return self.rootdir / "fixtures" / KIND / path.name
        return path

    def lines(self) -> list[str]:
        if self.judgement is None:
            return []
        out = [f"expectations --mc-expect={self.spec}"
               + (" (strict)" if self.strict else "") + ":"]
        out += [f"  {line}" for line in self.judgement.lines(self.strict)]
        out += [f"  failed without naming a requirement (no expectation covers it): {n}"
                for n in self.unlabelled_failures]
        out += [f"  updated {p}" for p in self.written]
        if self.judgement.failing(self.strict) and not self.update:
            out.append(f"  a change on purpose? record it with --mc-expect-update, or edit "
                       f"{', '.join(str(t.path) for t in self.expectations.files())}")
        return out

    def regressed(self) -> bool:
        return bool(self.judgement and self.judgement.of_kind(REGRESSION))

    def as_json(self) -> dict[str, Any]:
        return self.judgement.as_json(self.spec, self.strict) if self.judgement else {}


def _is_path(spec: str) -> bool:
    return spec.endswith(".toml") or "/" in spec or "\\" in spec
