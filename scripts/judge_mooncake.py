#!/usr/bin/env python3
"""Judge a Mooncake release and write what was observed into README.md.

Runs the conformance suites in one pytest session over the shipped matrix ``release``
(the reference engine's two profiles beside the real build), keeps the JSON report in
``fixtures/reports/release.json`` with the date and the versions judged, and rewrites only the
README region between the ``mooncake-judging`` markers from that report. Rendering depends on the
report alone, so rendering one report twice changes nothing.

    python scripts/judge_mooncake.py                 # run the suites (~4 min here), render
    python scripts/judge_mooncake.py --target mooncake:/opt/mooncake
    python scripts/judge_mooncake.py --no-run        # render the stored report again
    python scripts/judge_mooncake.py --check         # exit 1 when the README region is stale
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REPORT = ROOT / "fixtures" / "reports" / "release.json"
MATRIX = "release"
START = "<!-- mooncake-judging:start -->"
END = "<!-- mooncake-judging:end -->"
REFERENCE_COLUMNS = ("reference", "reference:legacy")
PYTEST_OK = (0, 1)
"""pytest exit statuses after which the report is a judgement (1: some test failed)."""
LINE_LIMIT = 240


class StaleReadme(Exception):
    """The README cannot take the rendered region (markers missing or repeated)."""


# ------------------------------------------------------------------------------------- running


def matrix_argument(target: str, workdir: Path) -> str:
    """``--mc-matrix`` value: the release matrix, or a copy whose build column is ``target``."""
    if target == "mooncake":
        return MATRIX
    path = workdir / "release-matrix.toml"
    columns = [*REFERENCE_COLUMNS, target]
    path.write_text("".join(f'[[column]]\ntarget = "{c}"\n\n' for c in columns))
    return str(path)


def pytest_command(matrix: str, report: Path, workers: int, seed: int | None) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "suites/", "-q",
            "-p", "no:cacheprovider", f"--mc-matrix={matrix}", f"--mc-report={report}"]
    if workers > 1:
        argv += ["-n", str(workers)]
    if seed is not None:
        argv.append(f"--mc-seed={seed}")
    return argv


def versions(columns: list[str]) -> dict[str, str]:
    """Each column's version as its target reports it (the matrix header's words)."""
    sys.path.insert(0, str(ROOT))
    from pytest_mooncake.targets import resolve_target  # noqa: PLC0415

    return {label: resolve_target(label).version for label in columns}


def run(target: str, report: Path, workers: int, seed: int | None) -> dict[str, Any]:
    """Run the suites; the report with ``judged`` facts added, or SystemExit on a broken run."""
    with tempfile.TemporaryDirectory(prefix="judge-mooncake-") as tmp:
        out = Path(tmp) / "report.json"
        argv = pytest_command(matrix_argument(target, Path(tmp)), out, workers, seed)
        print("running:", " ".join(argv), flush=True)
        status = subprocess.call(argv, cwd=ROOT)
        if status not in PYTEST_OK or not out.exists():
            raise SystemExit(f"pytest exited with status {status} without a judgement; the "
                             f"stored report and README were left as they were")
        doc = json.loads(out.read_text())
    columns = list(doc.get("columns") or {doc["target"]: None})
    doc["judged"] = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": versions(columns),
        "build": target,
        "command": " ".join(["python", *argv[1:]]).replace(str(out), "REPORT"),
    }
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


# ------------------------------------------------------------------------------------- reading


def column_requirements(doc: Mapping[str, Any], column: str) -> Mapping[str, Any]:
    columns = doc.get("columns")
    if columns:
        return columns.get(column, {}).get("requirements", {})
    return doc.get("requirements", {}) if doc.get("target") == column else {}


def column_names(doc: Mapping[str, Any]) -> list[str]:
    return list(doc.get("columns") or [doc["target"]])


def build_column(doc: Mapping[str, Any]) -> str:
    """The column of the build judged (the one that is not a reference profile)."""
    others = [c for c in column_names(doc) if c not in REFERENCE_COLUMNS]
    return others[-1] if others else column_names(doc)[-1]


def cell(entry: Mapping[str, Any] | None) -> str:
    """The matrix cell, as the terminal matrix writes it."""
    if not entry:
        return "-"
    tests = entry.get("tests", [])
    count = {o: sum(t.get("outcome") == o for t in tests) for o in
             ("passed", "failed", "error", "skipped")}
    verdict = entry.get("verdict")
    if verdict == "pass":
        return f"pass ({count['passed']})" + (f" +{count['skipped']} n/a"
                                              if count["skipped"] else "")
    if verdict == "FAIL":
        return f"**FAIL** ({count['failed']}/{len(tests)})"
    if verdict == "error":
        return f"error ({count['error']}/{len(tests)})"
    return "n/a"


def test_name(nodeid: str, column: str) -> str:
    """The test function, with the matrix column dropped from its parameter id."""
    name = nodeid.rpartition("::")[2]
    base, bracket, params = name.partition("[")
    params = params.removesuffix("]")
    if params == column:
        params = ""
    elif params.endswith(f"-{column}"):
        params = params[: -len(column) - 1]
    elif params.startswith(f"{column}-"):
        params = params[len(column) + 1:]
    return f"{base}[{params}]" if bracket and params else base


def what_it_did(message: str | None) -> str:
    """One line from a failure message: no exception-type prefix, no pytest introspection."""
    if not message:
        return "(the report holds no failure message)"
    lines = [ln.strip() for ln in message.strip().splitlines()]
    kept = []
    for line in lines:
        if kept and (line.startswith("assert ") or line.startswith("+  where")):
            break
        kept.append(line)
    text = " ".join(ln for ln in kept if ln)
    text = re.sub(r"^(Failed|[A-Za-z_.]*(Error|Exception|Timeout)):\s*", "", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"[;.]\s*(MR|CO|MP)-\d+ (requires|keeps|says)\b.*$", "", text).strip()
    if len(text) > LINE_LIMIT:
        text = text[:LINE_LIMIT].rsplit(" ", 1)[0] + " ..."
    return text


def md(text: str) -> str:
    return text.replace("|", "\\|")


# ------------------------------------------------------------------------------------- rendering

COMMANDS = """\
Judge the installed wheel (`pip install mooncake-transfer-engine-non-cuda`, with
`apt-get install -y libibverbs1 librdmacm1 libnuma1`):

    python -m pytest -p pytest_mooncake suites/ -n 2 --mc-target=mooncake --mc-report=mooncake.json

A build in an install directory (the `mooncake` package, optionally `bin/` and a `*.dist-info`),
or a pip requirement the installed wheel must satisfy:

    python -m pytest -p pytest_mooncake suites/ -n 2 --mc-target=mooncake:/opt/mooncake --mc-report=mooncake.json
    python -m pytest -p pytest_mooncake suites/ -n 2 --mc-target=mooncake:mooncake-transfer-engine-non-cuda==0.3.13.post1

A docker image (needs a Docker engine; this machine has none, so there every test is n/a with
"no Docker engine at DOCKER_HOST=..."):

    python -m pytest -p pytest_mooncake suites/ -n 2 --mc-target=docker:kvcacheai/mooncake:0.3.13 --mc-report=docker.json

An existing deployment described in a file (it observes, and injects only the faults the file
allows; it never starts or kills what it was not told it may):

    python -m pytest -p pytest_mooncake suites/ --mc-target=cluster:example --mc-report=cluster.json

Side by side with the reference engine, one session and one column per target
(`pytest_mooncake/data/matrices/release.toml`: reference, reference:legacy, mooncake):

    python -m pytest -p pytest_mooncake suites/ -n 2 --mc-matrix=release --mc-report=release.json

Regenerate this section (runs that matrix, about 4 minutes on 2 cores, keeps the report in
`fixtures/reports/release.json` and rewrites only this region of the README):

    python scripts/judge_mooncake.py                             # the installed wheel
    python scripts/judge_mooncake.py --target mooncake:/opt/mooncake
    python scripts/judge_mooncake.py --no-run                    # render the stored report again
    python scripts/judge_mooncake.py --check                     # exit 1 if this section is stale
"""

READING = """\
- **pass (n)**: every test naming the requirement that ran passed (n ran; `+k n/a` counts tests
  of it this target could not run).
- **FAIL (k/n)**: k of n tests failed. The build was driven and behaved against the requirement;
  the pytest output shows the failure message and the logs of every process the test used
  (engines, masters, clients, etcd, the fault proxy), and `--alluredir` attaches them in Allure.
- **n/a**: every test was skipped because the target lacks the *means* (no RDMA device it lets the
  test control, no cache-TTL knob, no admin endpoint); the reason names what is missing. n/a is
  not a pass.
- **error**: a setup or teardown broke, so nothing was judged.
- `reference` is the RFC behaviour, `reference:legacy` the reference engine configured like
  Mooncake 0.3.13 (the suites must catch it: `tests/test_detection_proof.py`), the last column
  the real build.
- The JSON report (`--mc-report`) holds per column and requirement the verdict and each test with
  its outcome, n/a reason or failure message.
"""


def header_of(column: str, version: str | None) -> str:
    if column in REFERENCE_COLUMNS or not version:
        return column
    return f"{column} {version.split()[-1]}"


def render(doc: Mapping[str, Any], titles: Mapping[str, str]) -> str:
    """The README region (without the markers) for one report."""
    judged = doc.get("judged", {})
    vers = judged.get("versions", {})
    columns = column_names(doc)
    build = build_column(doc)
    reqs = list(titles) + sorted({r for c in columns for r in column_requirements(doc, c)}
                                 - set(titles))
    reqs = [r for r in reqs if any(r in column_requirements(doc, c) for c in columns)]
    build_reqs = column_requirements(doc, build)
    tally = {v: sum(e.get("verdict") == v for e in build_reqs.values())
             for v in ("pass", "FAIL", "n/a", "error")}
    seed = doc.get("seed")
    out = [
        "<!-- generated by scripts/judge_mooncake.py from fixtures/reports/release.json; "
        "edits here are overwritten -->",
        "",
        "### Commands",
        "",
        COMMANDS,
        "### Reading the matrix",
        "",
        READING,
        "### Observed on this machine",
        "",
        f"`{vers.get(build, build)}` judged {judged.get('date', 'on an unrecorded date')}, "
        f"seed {seed} (rerun with `--mc-seed={seed}`): "
        + ", ".join(f"{n} {v}" for v, n in tally.items() if n) + f" of {len(build_reqs)} "
        "requirements.",
        "",
        "| requirement | title | " + " | ".join(header_of(c, vers.get(c)) for c in columns)
        + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for req in reqs:
        cells = [cell(column_requirements(doc, c).get(req)) for c in columns]
        out.append(f"| {req} | {md(titles.get(req, '?'))} | " + " | ".join(cells) + " |")
    failing = [(req, t) for req in reqs for t in build_reqs.get(req, {}).get("tests", [])
               if t.get("outcome") in ("failed", "error")]
    if failing:
        out += ["", f"What {header_of(build, vers.get(build))} did where it fails:", ""]
        out += [f"- **{req}** `{md(test_name(t['nodeid'], build))}`"
                f"{' (error)' if t['outcome'] == 'error' else ''}: {md(what_it_did(t.get('message')))}"
                for req, t in failing]
    reasons: dict[str, list[str]] = {}
    for req in reqs:
        entry = build_reqs.get(req, {})
        if entry.get("verdict") != "n/a":
            continue
        for t in entry.get("tests", []):
            if t.get("reason") and req not in reasons.setdefault(t["reason"], []):
                reasons[t["reason"]].append(req)
    if reasons:
        out += ["", f"Why {build} is n/a (the means it lacks):", ""]
        out += [f"- {', '.join(ids)}: {md(reason)}" for reason, ids in reasons.items()]
    return "\n".join(out).rstrip() + "\n"


def replace_region(readme: str, region: str) -> str:
    """``readme`` with only the lines between the marker lines replaced (a marker counts only on
    a line of its own, so prose may quote it)."""
    lines = readme.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise StaleReadme(f"README must hold one line {START} and, after it, one line {END}")
    return "".join(lines[: starts[0] + 1]) + region + "".join(lines[ends[0]:])


def load_titles() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from pytest_mooncake.report.catalogue import load_catalogue  # noqa: PLC0415

    catalogue = load_catalogue()
    ids = sorted((r for r in catalogue.requirements), key=catalogue.order)
    return {r: catalogue[r].title for r in ids}


# ------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="mooncake",
                        help="the build column, as --mc-target spells it (default: mooncake, the "
                             "installed wheel)")
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--no-run", action="store_true", help="render the stored report")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when the README region differs from the stored report's")
    args = parser.parse_args(argv)

    if args.no_run or args.check:
        if not args.report.exists():
            print(f"no report at {args.report}; run without --no-run/--check first",
                  file=sys.stderr)
            return 2
        doc = json.loads(args.report.read_text())
    else:
        doc = run(args.target, args.report, args.workers, args.seed)
    current = args.readme.read_text()
    try:
        wanted = replace_region(current, render(doc, load_titles()))
    except StaleReadme as exc:
        print(f"{args.readme}: {exc}", file=sys.stderr)
        return 2
    if wanted == current:
        print(f"{args.readme}: the judging section is up to date")
        return 0
    if args.check:
        print(f"{args.readme}: the judging section is stale; run scripts/judge_mooncake.py "
              f"--no-run", file=sys.stderr)
        return 1
    args.readme.write_text(wanted)
    print(f"{args.readme}: judging section rewritten from {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
