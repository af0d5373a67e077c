"""Re-runs (``--mc-confirm``) in the Allure results: each re-run test's result is marked after
the session, when its re-runs are known (the workers wrote the results while the tests ran).

A requirement test carries the label ``mc_nodeid`` (``allure_glue.target_parameter``), so its
result file can be found again. A test seen both failing and passing gets Allure's own flaky
flag (``statusDetails.flaky``) and the tag ``intermittent``; one that failed every time the tag
``FAIL reproduced``; both get the label ``mc_runs`` (k/N and the seeds of each outcome) and
``mc_replay`` (the command replaying its first failing run). The shipped categories put flaky
results in their own category (``allure_run_files.CATEGORIES``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_mooncake.report.allure_glue import NODEID_LABEL
from pytest_mooncake.report.conformance_matrix import ConformanceMatrix, RunTally
from pytest_mooncake.report.verdict_rule import VERDICT_FAIL

INTERMITTENT_TAG = "intermittent"
REPRODUCED_TAG = "FAIL reproduced"


def mark_reruns(directory: str | None, matrix: ConformanceMatrix) -> int:
    """Mark the results in ``directory`` (``--alluredir``; None: no Allure) of every re-run
    test; how many result files were marked."""
    tests = matrix.rerun_tests()
    if not directory or not tests:
        return 0
    marked = 0
    for path in Path(directory).glob("*-result.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        labels = doc.get("labels") or []
        nodeid = next((lb.get("value") for lb in labels if lb.get("name") == NODEID_LABEL), None)
        test = tests.get(nodeid)
        if test is None:
            continue
        tally = RunTally.of_test(matrix.seed, test)
        intermittent = 0 < tally.failed < tally.judged
        labels += [{"name": "tag", "value": INTERMITTENT_TAG if intermittent else REPRODUCED_TAG},
                   {"name": "mc_runs", "value": f"{tally.ratio}: {tally.describe()}"}]
        seed = tally.seeds(VERDICT_FAIL)[0] if tally.failed else None
        if seed is not None and matrix.replay is not None:
            labels.append({"name": "mc_replay", "value": matrix.replay(seed, nodeid)})
        doc["labels"] = labels
        if intermittent:
            doc.setdefault("statusDetails", {})["flaky"] = True
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        marked += 1
    return marked
