"""merge: columns of separate runs assembled into one matrix report.

    python -m pytest_mooncake.report merge A.json B.json ... -o matrix.json [--matrix NAME]

Each input is a one-target or a matrix report; each of its columns is copied as it is, with the
seed and start time of the run that judged it (``seed``, ``started`` in the column), so a column
can be rerun alone. A label found in two inputs is an error (merge never picks one). The result
has the matrix form of ``pytest_mooncake/data/report.schema.json`` (``matrix``, ``columns``, the
summary over every column); its top-level ``seed`` and ``started`` are the first input's, its
``duration_s`` the sum of the inputs' (test time, not wall time), its ``schema_version`` the
writer's (v2 only added keys, so a v1 column is a valid v2 one), and ``merged_from`` lists the
inputs. A column keeps the ``deployment`` its run recorded (a one-target report's too), and where
one build's profiles judged a requirement differently the result carries the
``profile_differences`` lines a matrix run writes. Exit status: 0 written; 2 an input cannot be
read or two inputs share a column.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pytest_mooncake.report.json_report import SCHEMA_VERSION, summary
from pytest_mooncake.report.profile_differences import profile_differences
from pytest_mooncake.report.report_columns import columns, read_report
from pytest_mooncake.report.verdict_rule import VERDICTS

HELP = "assemble the columns of several reports into one matrix report"


class MergeError(ValueError):
    pass


def _summary(requirements: dict[str, Any]) -> dict[str, Any]:
    """``json_report.summary``, counting also verdicts this plugin does not give (a column of a
    newer run, e.g. ``intermittent``)."""
    out = summary(requirements)
    for entry in requirements.values():
        if entry["verdict"] not in out["verdicts"]:
            out["verdicts"][entry["verdict"]] = sum(
                e["verdict"] == entry["verdict"] for e in requirements.values())
    return out


def merge(docs: list[tuple[str, dict[str, Any]]], matrix: str = "") -> dict[str, Any]:
    """One matrix report of ``docs`` (``(name, report)`` pairs, in column order)."""
    if not docs:
        raise MergeError("nothing to merge: give at least one report")
    merged: dict[str, dict[str, Any]] = {}
    source: dict[str, str] = {}
    rules: list[str] = []
    problems: list[str] = []
    for name, doc in docs:
        for label, column in columns(doc).items():
            if label in merged:
                raise MergeError(f"column {label!r} is in both {source[label]} and {name}; "
                                 f"merge takes each column from one run")
            body = {k: v for k, v in column.document.items() if k not in ("seed", "started")}
            body.setdefault("target", label)
            body.setdefault("summary", _summary(dict(column.requirements)))
            for verdict in VERDICTS:  # a v1 column counts no intermittent: it had none
                body["summary"].setdefault("verdicts", {}).setdefault(verdict, 0)
            merged[label] = {**body, "seed": column.document.get("seed", doc["seed"]),
                             "started": column.document.get("started", doc["started"])}
            source[label] = name
        fail_on = doc.get("fail_on") or {}
        rules.append(fail_on.get("rule", "never"))
        problems += fail_on.get("problems", [])
    first = docs[0][1]
    differences = profile_differences(merged)
    return {
        "schema_version": SCHEMA_VERSION,  # v2 only added keys: a v1 column is a valid v2 one
        "started": first["started"],
        "duration_s": round(sum(float(doc.get("duration_s", 0)) for _, doc in docs), 3),
        "seed": first["seed"],
        "matrix": matrix or "merged",
        "columns": merged,
        "summary": _summary({f"{c} {r}": e for c, col in merged.items()
                            for r, e in col["requirements"].items()}),
        "fail_on": {"rule": rules[0] if len(set(rules)) == 1 else ",".join(dict.fromkeys(rules)),
                    "problems": problems},
        "merged_from": [{"report": name, "seed": doc["seed"], "started": doc["started"],
                         "columns": list(columns(doc))} for name, doc in docs],
        **({"profile_differences": differences} if differences else {}),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json",
                        help="one-target or matrix reports, their columns in this order")
    parser.add_argument("-o", "--output", required=True, metavar="MATRIX.json",
                        help="where to write the merged matrix report")
    parser.add_argument("--matrix", default="", metavar="NAME",
                        help='what the merged matrix is called (its "matrix" key); '
                             'default "merged"')


def run(args: argparse.Namespace) -> int:
    from pytest_mooncake.report.command_errors import CommandError

    docs = [(path, read_report(path)) for path in args.reports]
    try:
        doc = merge(docs, args.matrix)
    except MergeError as exc:
        raise CommandError(str(exc)) from None
    Path(args.output).write_text(json.dumps(doc, indent=2) + "\n")
    labels = ", ".join(doc["columns"])
    print(f"merged {len(docs)} report(s) into {args.output}: {len(doc['columns'])} column(s) "
          f"({labels})")
    return 0
