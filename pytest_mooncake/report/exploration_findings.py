"""The release-matrix page's region for the RDMA explorations of real releases (issue #25).

``scripts/judge_rdma_explorations.py`` runs ``suites/rdma`` on the releases of
``fixtures/matrices/rdma-explorations.toml`` and stores the JSON report with, per test, what
each exploration recorded (``explorations``: "scenario: N schedule(s) ..."). This module turns
that report alone into Markdown between its own markers on ``docs/reference/release-matrix.md``
(the judging page): each CO requirement's verdict per release, how many schedules every
exploration ran, every finding with the command replaying its run and the token replaying its
schedule, and every n/a reason. Separate from ``judge_mooncake.py``'s region so each renders
from its own report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pytest_mooncake.report.marked_region import Markers

START = "<!-- rdma-explorations:start -->"
END = "<!-- rdma-explorations:end -->"
MARKERS = Markers(START, END, append=True)
"""The region on docs/reference/release-matrix.md (appended at its end when the page has none)."""
REQUIREMENTS = ("CO-2", "CO-3", "CO-4", "CO-5", "CO-9", "CO-10")
"""The requirements issue #25 has judged on real builds by explorations (shown first)."""
TOKEN = re.compile(r"--mc-replay=(mcs1\.[A-Za-z0-9_-]+)")
SCHEDULE = re.compile(r"^schedule (\d+) of the '(\w+)' exploration broke ([\w-]+): (\w+): (.*)$")
LINE_LIMIT = 260


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _short(column: str) -> str:
    return column.rpartition("==")[2] if "==" in column else column


def _params(name: str) -> list[str]:
    return name.partition("[")[2].removesuffix("]").split("-") if "[" in name else []


def _in_column(name: str, column: str) -> bool:
    """Whether a test name's parameters (``[COLUMN-param]``, ``[param-COLUMN]``) name
    ``column`` (a column label may itself hold a dash: matched as a whole)."""
    inside = name.partition("[")[2].removesuffix("]")
    return inside == column or inside.startswith(f"{column}-") or inside.endswith(f"-{column}")


def _test(nodeid: str, column: str) -> str:
    """The test as the page names it: its column dropped from the parameters."""
    name = nodeid.rpartition("::")[2]
    base, _, inside = name.partition("[")
    inside = inside.removesuffix("]")
    for rest in (inside.removeprefix(f"{column}-"), inside.removesuffix(f"-{column}")):
        if rest != inside:
            return f"{base}[{rest}]"
    return base if inside == column else name


def _what(message: str) -> str:
    """The failure's first line, without exception prefixes or the schedule's dump."""
    first = next((ln.strip() for ln in (message or "").splitlines() if ln.strip()),
                 "(no message)")
    first = re.sub(r"^(Failed|[A-Za-z_.]*(Error|Exception)):\s*", "", first)
    first = TOKEN.sub("--mc-replay=TOKEN", first)
    return first if len(first) <= LINE_LIMIT else first[:LINE_LIMIT].rsplit(" ", 1)[0] + " ..."


def _cell(entry: Mapping[str, Any] | None) -> str:
    if not entry:
        return "-"
    tests = entry.get("tests", [])
    verdict = entry.get("verdict", "n/a")
    passed = sum(t.get("outcome") == "passed" for t in tests)
    skipped = sum(t.get("outcome") == "skipped" for t in tests)
    failed = sum(t.get("outcome") == "failed" for t in tests)
    if verdict == "pass":
        return f"pass ({passed})" + (f" +{skipped} n/a" if skipped else "")
    if verdict == "FAIL":
        return f"**FAIL** ({failed}/{len(tests)})"
    if verdict == "intermittent":
        ratio = (entry.get("confirmation") or {}).get("ratio", "")
        return f"**intermittent** {ratio}".rstrip()
    return verdict


def _requirements(doc: Mapping[str, Any], column: str) -> Mapping[str, Any]:
    return (doc.get("columns") or {}).get(column, {}).get("requirements", {})


def findings(doc: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every failed or intermittent test of the report: column, requirement, test, what it did,
    the command replaying its run (the first run's) and its schedule's token, if any."""
    out = []
    for column in doc.get("columns") or {}:
        for req, entry in _requirements(doc, column).items():
            for t in entry.get("tests", []):
                runs = t.get("runs") or []
                if t.get("outcome") not in ("failed", "error") and not any(
                        r.get("outcome") == "failed" for r in runs):
                    continue
                message = t.get("message") or next((r.get("message") for r in runs
                                                    if r.get("message")), "")
                token = TOKEN.search(message or "") or TOKEN.search(
                    "--mc-replay=" + (doc.get("replay_tokens") or {}).get(
                        t["nodeid"].rpartition("::")[2], ""))
                failed_runs = [r for r in runs if r.get("outcome") == "failed"]
                replay = (failed_runs or runs or [{}])[0].get("replay", "")
                out.append({"column": column, "requirement": req,
                            "test": _test(t["nodeid"], column), "what": _what(message),
                            "verdict": entry.get("verdict", ""),
                            "ratio": (entry.get("confirmation") or {}).get("ratio", ""),
                            "replay": replay, "token": token.group(1) if token else ""})
    return out


def render(doc: Mapping[str, Any], source: str) -> str:
    """The region (without its markers) for one stored report, a function of it alone."""
    columns = list(doc.get("columns") or {})
    judged = doc.get("judged", {})
    reqs = [r for r in REQUIREMENTS if any(r in _requirements(doc, c) for c in columns)]
    reqs += sorted({r for c in columns for r in _requirements(doc, c)} - set(reqs),
                   key=lambda r: (r.split("-")[0], int(r.split("-")[1])))
    out = [f"<!-- generated by scripts/judge_rdma_explorations.py from {source}; edits here "
           "are overwritten -->", "",
           "## RDMA explorations of real releases", "",
           "`suites/rdma` on each release's engines over emulated verbs, with schedules "
           "explored at the verbs boundary ([RDMA concurrency of real builds]"
           "(../rdma-exploration.md)): "
           f"judged {judged.get('date', 'on an unrecorded date')}, seed {doc.get('seed')}, "
           f"{judged.get('wall_seconds', 0) / 60:.0f} min wall (`{judged.get('command', '')}`).",
           "", "| requirement | " + " | ".join(_short(c) for c in columns) + " |",
           "|---|" + "---|" * len(columns)]
    for req in reqs:
        out.append(f"| {req} | " + " | ".join(_cell(_requirements(doc, c).get(req))
                                              for c in columns) + " |")
    explored = doc.get("explorations") or {}
    if explored:
        out += ["", "Schedules each exploration ran:", ""]
        for column in columns:
            lines = sorted((v, _test(k, column).partition("[")[0]) for k, v in explored.items()
                           if _in_column(k, column))
            out += [f"- {_short(column)} `{test}`: {_md(v)}" for v, test in lines]
    order = {r: i for i, r in enumerate(reqs)}
    found = sorted(findings(doc), key=lambda f: (columns.index(f["column"]),
                                                 order.get(f["requirement"], len(order))))
    if found:
        out += ["", "Findings, each with the command replaying its run (the exploration, from "
                "its seed) and the token replaying its schedule (the verbs calls' order; a "
                "race on a lock between two calls is not replayed, so the exploration is the "
                "reliable reproducer):", ""]
        for f in found:
            ratio = f" ({f['ratio']} runs)" if f["ratio"] else ""
            out.append(f"- **{f['requirement']}** {_short(f['column'])} `{_md(f['test'])}` "
                       f"{f['verdict']}{ratio}: {_md(f['what'])}")
            if f["replay"]:
                out += ["", "  ```text", f"  {f['replay']}", "  ```"]
            if f["token"]:
                out += ["", f"  that schedule alone ({doc.get('replay_tokens_from', 'this run')})"
                        ": add", "", "  ```text", f"  --mc-replay={f['token']}", "  ```"]
            out.append("")
    for column in columns:
        reasons: dict[str, list[str]] = {}
        for req, entry in _requirements(doc, column).items():
            for t in entry.get("tests", []):
                if t.get("outcome") == "skipped" and t.get("reason"):
                    ids = reasons.setdefault(t["reason"], [])
                    if req not in ids:
                        ids.append(req)
        if reasons:
            out += ["", f"n/a tests on {_short(column)} (the means the probe found lacking):", ""]
            out += [f"- {', '.join(ids)}: {_md(reason)}" for reason, ids in reasons.items()]
    return "\n".join(out).rstrip() + "\n"
