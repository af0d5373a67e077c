"""Which failure messages speak of the build, and which of our own harness.

A verdict caused by the harness is a bug of ours (REQUIREMENTS.md), and a reader of the matrix
cannot act on a FAIL whose message names our machinery instead of what the build did. Every
failure message is read against a small vocabulary of **harness symptoms**: the ways our own
code shows through a message. A message that shows none is taken as the build's (it names
what the build did, or what a probe of it saw). Each symptom names its cause and how it is
fixed, so a new message of that kind is fixed the same way, not added to a list.

The symptoms are kinds, not strings of one test: an assert without words of its own, our
wait's deadline escaping a test, a settle loop's deadline, a wall-clock deadline that
cannot tell a starved machine from a stuck build, our handle refusing a call made
before the build did what the test waited for, and an exception raised by test code itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Symptom:
    name: str
    pattern: re.Pattern[str]
    cause: str
    fix: str

    def matches(self, message: str) -> bool:
        return bool(self.pattern.search(message))


def _symptom(name: str, pattern: str, cause: str, fix: str) -> Symptom:
    return Symptom(name, re.compile(pattern, re.MULTILINE), cause, fix)


SYMPTOMS: tuple[Symptom, ...] = (
    _symptom(
        "settle-deadline",
        r"did not settle|= settle\(\)|waiting for the cluster to settle|"
        r"did not come to rest within [\d.]+s: nothing outstanding",
        "a settle loop of ours reached its deadline and the test asserted its bare False: the "
        "message names our loop, not what the build was doing",
        "settle() raises NotQuiescent naming what the build did not finish (transfers, "
        "unacknowledged events, unpolled completions, what kept moving)"),
    _symptom(
        "helper-timeout",
        r"^(pytest_mooncake\.runtime\.deadlines\.)?Timeout: timed out after",
        "a wait of ours (wait_until) reached its deadline and its Timeout left the test "
        "unread: the message says what we waited for, not what the build did",
        "the test catches the deadline and fails with what it observed of the build"),
    _symptom(
        "harness-refusal",
        r"settle\(\) first|^pytest_mooncake\.targets\.base\.TargetError: |"
        r"^VerbsControlError: |\bVerbsControlError: (?!.*(died|gone|exit))",
        "our own handle or emulated device refused a call: the test ran ahead of the build "
        "(a timing-dependent precondition) or drove our component wrongly",
        "the test waits for the state it needs (settle, a held WR) before the call"),
    _symptom(
        "unmeasured-deadline",
        r"stuck_slice: transfer \d+ \([^)]*\) never ended(?!: in [\d.]+s \(deadline)|"
        r"no master attached within [\d.]+s \(|"
        r"put \S+ failed on the healthy leader: .*(OBJECT_ALREADY_EXISTS|rc=-705\b)",
        "a fixed wall-clock deadline of ours ran out, or a precondition failed on our own "
        "retry, and the message cannot tell the build's finding from a machine starved of CPU "
        "(load 20-50 on two cores: an exploration took 217 s instead of 12 s)",
        "the deadline counts only time the build's and our threads could run "
        "(runtime/cpu_starvation.py) and says what it measured; a wait that never had that "
        "time, and a precondition our own retry broke, raise PreconditionUnestablished (error, "
        "not FAIL)"),
    _symptom(
        "bare-assertion",
        r"\A(AssertionError: )?assert ",
        "a check failed without words of its own: nothing in the message says what was seen",
        "every assert of a suite carries a message naming the observation"),
    _symptom(
        "test-code-exception",
        r"\A(builtins\.)?(IndexError|KeyError|TypeError|AttributeError|NameError|"
        r"UnboundLocalError|ZeroDivisionError)\b",
        "test or harness code raised on data it did not expect (e.g. an empty post log)",
        "the test checks the observation and fails naming it"),
)
"""The harness symptoms, each a kind of message with its cause and its fix."""


def symptom_of(message: str | None) -> Symptom | None:
    """The first harness symptom ``message`` shows; None when it speaks of the build."""
    if not message:
        return None
    for symptom in SYMPTOMS:
        if symptom.matches(message):
            return symptom
    return None


@dataclass(frozen=True)
class Failure:
    """One failed or errored run of a test in a report."""

    column: str
    requirement: str
    nodeid: str
    outcome: str
    seed: int | None
    message: str

    @property
    def symptom(self) -> Symptom | None:
        return symptom_of(self.message)

    @property
    def first_line(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else ""


def failures(doc: Mapping[str, Any]) -> Iterator[Failure]:
    """Every failed or errored run (the run itself and each re-run) of every test, per column
    and requirement, as a report (flat or matrix, schema 1 or 2) holds them."""
    from pytest_mooncake.report.report_columns import columns

    for label, col in columns(doc).items():
        for req, entry in col.requirements.items():
            for test in entry.get("tests", []):
                for run in test.get("runs") or [test]:
                    if run.get("outcome") in ("failed", "error") and run.get("message"):
                        yield Failure(label, req, test["nodeid"], run["outcome"],
                                      run.get("seed", col.seed), run["message"])
