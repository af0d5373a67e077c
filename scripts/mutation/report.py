"""The verdicts in words: the tables (per mutant, per requirement) and the kill rates (suites
alone, suites + project tests)."""

from __future__ import annotations

from typing import Any

from mutation.runner import ERROR, HANG, SURVIVED, Result


def summary(results: list[Result], beyond_tested: frozenset[str] = frozenset()
            ) -> dict[str, Any]:
    """``beyond_tested``: ids of ``[[tested]]`` entries scoped beyond the requirements; those
    not killed by the suites are set aside in ``suite_kill_rate_of_requirements``."""
    total = len(results)
    judged = [r for r in results if r.status != ERROR]
    killed = [r for r in judged if r.killed]
    by_suites = [r for r in killed if r.phase == "suites"]
    beyond = [r for r in judged if r.id in beyond_tested and r.phase != "suites"]

    def rate(n: int, of: int) -> float:
        return round(100.0 * n / of, 1) if of else 0.0
    return {"total": total, "judged": len(judged), "killed": len(killed),
            "killed_by_suites": len(by_suites), "survived": len(judged) - len(killed),
            "errors": total - len(judged), "kill_rate": rate(len(killed), len(judged)),
            "suite_kill_rate": rate(len(by_suites), len(judged)),
            "beyond_held_by_tests": len(beyond),
            "suite_kill_rate_of_requirements": rate(len(by_suites), len(judged) - len(beyond)),
            "unconfirmed": [r.id for r in killed if r.confirmed is False]}


def table(results: list[Result]) -> str:
    rows = [("mutant", "requirement", "killed by", "time")]
    for r in results:
        who = r.status if r.status in (SURVIVED, ERROR) else (
            f"hang ({r.detail.split(':')[0]})" if r.status == HANG else r.killed_by or r.status)
        if r.confirmed is False:
            who += " (UNCONFIRMED: fails unmutated too)"
        rows.append((r.id, ",".join(r.requirements), who, f"{r.seconds:.0f}s"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, [*widths, 5], strict=False))
                     + " |")
        if i == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in [*widths, 5]) + "|")
    return "\n".join(lines)


def requirement_table(results: list[Result], triaged: dict[str, tuple[str, list[str]]],
                      beyond_tested: frozenset[str] = frozenset()) -> str:
    """Per requirement: generated, killed (by the suites, by project tests), timed out (a hang
    is a kill), survived, equivalent and beyond-requirements (triaged out of the run, or held
    by a project test: ``beyond_tested``, the ids of ``[[tested]]`` entries so scoped), errors.
    ``triaged``: mutant id -> (verdict, its requirements). A mutant of several requirements
    counts under each. Two rates: the suites' kills of the mutants that change a requirement's
    property (beyond-requirements set aside), and of every non-equivalent one (strict)."""
    cols = ("generated", "killed by suites", "killed by tests", "of which hangs", "survived",
            "equivalent", "beyond", "error")
    rows: dict[str, dict[str, int]] = {}

    def row(req: str) -> dict[str, int]:
        return rows.setdefault(req, dict.fromkeys(cols, 0))
    for r in results:
        for req in r.requirements:
            c = row(req)
            c["generated"] += 1
            if r.status == ERROR:
                c["error"] += 1
            elif r.killed and r.phase != "suites" and r.id in beyond_tested:
                c["beyond"] += 1  # killed by its project test; no requirement speaks of it
            elif r.killed:
                c["killed by suites" if r.phase == "suites" else "killed by tests"] += 1
                c["of which hangs"] += r.status == HANG
            else:
                c["survived"] += 1
    for verdict, reqs in triaged.values():
        for req in reqs:
            c = row(req)
            c["generated"] += 1
            c["equivalent" if verdict == "equivalent" else "beyond"] += 1

    def order(req: str) -> tuple[str, int]:
        fam, _, num = req.partition("-")
        return fam, int(num) if num.isdigit() else 0
    lines = ["| requirement | " + " | ".join(cols) + " | suites' kill rate | strict |",
             "|---|" + "---|" * (len(cols) + 2)]
    total = dict.fromkeys(cols, 0)
    for req in sorted(rows, key=order):
        c = rows[req]
        for k in cols:
            total[k] += c[k]
        lines.append(f"| {req} | " + " | ".join(str(c[k]) for k in cols)
                     + f" | {_rate(c)} | {_rate(c, strict=True)} |")
    lines.append("| all (a mutant counted once per requirement) | "
                 + " | ".join(str(total[k]) for k in cols)
                 + f" | {_rate(total)} | {_rate(total, strict=True)} |")
    return "\n".join(lines)


def _rate(c: dict[str, int], strict: bool = False) -> str:
    """Suites' kills of the judged, non-equivalent mutants: beyond-requirements set aside, or
    (``strict``) counted as mutants the suites should have killed."""
    judged = (c["generated"] - c["equivalent"] - c["error"]
              - (0 if strict else c["beyond"]))
    return f"{100.0 * c['killed by suites'] / judged:.0f} %" if judged else "-"
