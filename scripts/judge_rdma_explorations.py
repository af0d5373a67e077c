#!/usr/bin/env python3
"""Judge suites/rdma on real releases with explorations at the verbs boundary, and render it.

Runs ``suites/rdma`` over the matrix ``fixtures/matrices/rdma-explorations.toml`` (0.3.13.post1
and 0.3.14 on emulated verbs) in one pytest session (``-n 2``, ``--mc-confirm=2``: a failed test
is re-run with the seed and two drawn from it), stores the JSON report with what each exploration
recorded (the ``mc_exploration`` property of its JUnit entry: schedules run, distinct, seconds)
in ``fixtures/reports/rdma-exploration.json``, and rewrites only the region of
``docs/reference/release-matrix.md`` between the ``rdma-explorations`` markers from that report
(``pytest_mooncake/report/exploration_findings.py``).

    python scripts/judge_rdma_explorations.py               # run (~40 min here) and render
    python scripts/judge_rdma_explorations.py --no-run      # render the stored report again
    python scripts/judge_rdma_explorations.py --check       # exit 1 when the region is stale
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pytest_mooncake.report.exploration_findings import MARKERS, TOKEN, render  # noqa: E402
from pytest_mooncake.report.marked_region import update_page  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "release-matrix.md"
REPORT = ROOT / "fixtures" / "reports" / "rdma-exploration.json"
MATRIX = "rdma-explorations"
PYTEST_OK = (0, 1)


def explorations(junit: Path) -> dict[str, str]:
    """{test name with its parameters: the exploration's summary} from a JUnit XML file."""
    out: dict[str, str] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "mc_exploration":
                out[case.get("name", "")] = prop.get("value", "")
    return out


def replay_tokens(junit: Path) -> dict[str, str]:
    """{test name with its parameters: the --mc-replay token its failure printed} (the JSON
    report keeps only the start of a failure message; JUnit keeps it whole)."""
    out: dict[str, str] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).iter("testcase"):
        failure = case.find("failure")
        found = TOKEN.search(failure.text or "") if failure is not None else None
        if found:
            out[case.get("name", "")] = found.group(1)
    return out


def run(report: Path, workers: int, seed: int | None, confirm: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="judge-rdma-") as tmp:
        out, junit = Path(tmp) / "report.json", Path(tmp) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "-p", "pytest_mooncake", "-p", "no:cacheprovider",
                "suites/rdma", "-q", f"--mc-matrix={MATRIX}", f"--mc-confirm={confirm}",
                f"--mc-report={out}", f"--junitxml={junit}"]
        if workers > 1:
            argv += ["-n", str(workers)]
        if seed is not None:
            argv.append(f"--mc-seed={seed}")
        print("running:", " ".join(argv), flush=True)
        began = time.monotonic()
        status = subprocess.call(argv, cwd=ROOT)
        wall = time.monotonic() - began
        if status not in PYTEST_OK or not out.exists():
            raise SystemExit(f"pytest exited with status {status} without a judgement; the "
                             f"stored report and page were left as they were")
        doc = json.loads(out.read_text())
        doc["explorations"] = explorations(junit)
        doc["replay_tokens"] = replay_tokens(junit)
        doc["replay_tokens_from"] = "the run's own schedule"
    doc["judged"] = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "workers": workers, "wall_seconds": round(wall),
        "command": " ".join(["python", *argv[1:]]).replace(str(out), "REPORT")
        .replace(f" --junitxml={junit}", ""),
    }
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"judged in {wall / 60:.1f} min wall; report {report}", flush=True)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, default=REPORT, help="default: %(default)s")
    ap.add_argument("--page", type=Path, default=PAGE, help="default: %(default)s")
    ap.add_argument("--workers", type=int, default=2, help="default: %(default)s")
    ap.add_argument("--seed", type=int, help="--mc-seed of the run (default: random)")
    ap.add_argument("--confirm", type=int, default=2, help="--mc-confirm (default: %(default)s)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--no-run", action="store_true", help="render the stored report")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when the page's region differs from the stored report's")
    args = ap.parse_args(argv)
    if args.no_run or args.check:
        if not args.report.exists():
            print(f"no report at {args.report}; run without --no-run/--check first",
                  file=sys.stderr)
            return 2
        doc = json.loads(args.report.read_text())
    else:
        doc = run(args.report, args.workers, args.seed, args.confirm)
    try:
        shown = str(args.report.resolve().relative_to(ROOT))
    except ValueError:
        shown = str(args.report)
    return update_page(args.page, MARKERS, render(doc, shown), section="RDMA explorations section",
                       source=args.report, regenerate="scripts/judge_rdma_explorations.py --no-run",
                       check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
