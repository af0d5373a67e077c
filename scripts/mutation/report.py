"""The verdicts in words: the table and the kill rates (suites alone, suites + project tests)."""

from __future__ import annotations

from typing import Any

from mutation.runner import ERROR, HANG, SURVIVED, Result


def summary(results: list[Result]) -> dict[str, Any]:
    total = len(results)
    judged = [r for r in results if r.status != ERROR]
    killed = [r for r in judged if r.killed]
    by_suites = [r for r in killed if r.phase == "suites"]

    def rate(n: int) -> float:
        return round(100.0 * n / len(judged), 1) if judged else 0.0
    return {"total": total, "judged": len(judged), "killed": len(killed),
            "killed_by_suites": len(by_suites), "survived": len(judged) - len(killed),
            "errors": total - len(judged), "kill_rate": rate(len(killed)),
            "suite_kill_rate": rate(len(by_suites)),
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
