#!/usr/bin/env python3
"""Mutation testing of the conformance suites: does each curated bug of the reference engine die?

The catalogue (``mutants/*.toml``) holds small, plausible patches of the rfc reference engine,
each naming the requirement it breaks and why an implementer might write it. For every mutant
this script copies the repository to a scratch directory, applies the patch there, and runs

1. the conformance suites of its requirements (``pytest -p pytest_mooncake suites/
   --mc-only=ID,...``), then, if they all passed,
2. the project's own tests of the mutated module (the mutant's ``tests``).

Before any mutant, a baseline runs the same suites and tests on the unmutated tree: a test that
fails there would kill every mutant it judges, so the run stops instead (exit 2).
The first failing test kills the mutant; a run that outlives the deadline is a hang, also a kill.
A mutant that passes both is SURVIVED. The table, the kill rate of the suites alone and of
suites + project tests, and a JSON result (``--json``) come out at the end.

    python scripts/mutants.py                       # every mutant, 2 at a time (~1 h here)
    python scripts/mutants.py -j 2 --suites-only    # the suites' own kill rate
    python scripts/mutants.py --sample 4 --seed 7   # a rotating sample (CI)
    python scripts/mutants.py --only MR-7-clock-instance-id --keep /tmp/m
    python scripts/mutants.py --check               # anchors and syntax only, no test runs
    python scripts/mutants.py --source mechanical --family MR --sample 20   # generated mutants
    python scripts/mutants.py --source mechanical -j 1 --journal run.jsonl  # resumable

``--source mechanical`` judges the mechanical mutants instead (``mutation.mechanical``:
comparison, boolean, negation, constant, arithmetic, deletion and return edits over the functions
``mutants/mechanical/scope.toml`` maps to each requirement), less the survivors triaged by hand in
``mutants/mechanical/triage.toml`` (equivalent, or beyond what any requirement says); ``--source all`` judges both catalogues.

A patch is a list of anchored replacements: ``find`` must occur exactly once in its file, else the
catalogue is reported broken (an edit of the engine moved the code; update the anchor), so the
catalogue cannot rot silently. The mutated file must still compile.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

from mutation.catalogue import CatalogueError, Mutant, check, known_requirements, load_catalogue
from mutation.journal import Journal, JournalError, tree_commit
from mutation.mechanical import OPERATORS, generate, load_scope, load_tested_beyond, load_triage
from mutation.report import requirement_table, summary, table
from mutation.runner import BaselineFailed, Config, Result, run_all

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DEADLINE = 420.0


def default_python(root: Path) -> str:
    """The repository's own venv (what scripts/setup.sh makes) when it exists: a bare
    ``python scripts/mutants.py`` would otherwise judge with an interpreter that may lack the
    project's dependencies."""
    venv = root / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def select(mutants: list[Mutant], only: list[str], families: list[str], sample: int | None,
           seed: int, per_requirement: int | None = None) -> list[Mutant]:
    chosen = mutants
    if only:
        unknown = sorted(set(only) - {m.id for m in mutants})
        if unknown:
            raise SystemExit(f"mutants: unknown mutant id(s) {unknown}; --list shows them")
        chosen = [m for m in chosen if m.id in only]
    if families:
        chosen = [m for m in chosen if m.requirements[0].split("-")[0] in families]
    if per_requirement is not None:
        rng = random.Random(seed)
        by_req: dict[str, list[Mutant]] = {}
        for m in chosen:
            by_req.setdefault(m.requirements[0], []).append(m)
        chosen = sorted((m for group in by_req.values()
                         for m in rng.sample(group, min(per_requirement, len(group)))),
                        key=lambda m: m.id)
    if sample is not None and sample < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, sample), key=lambda m: m.id)
    return chosen


def load_mutants(args: argparse.Namespace, root: Path, reqs: set[str] | None,
                 triaged_out: dict[str, tuple[str, list[str]]] | None = None) -> list[Mutant]:
    """The mutants ``--source`` names; mechanical ones triaged by hand are left out (no suite
    can or should kill them: triage.toml says why, one by one). ``triaged_out`` receives those
    left out (id -> (verdict, requirements)) for the per-requirement table."""
    mutants = load_catalogue(args.catalogue, reqs) if args.source != "mechanical" else []
    if args.source != "curated":
        operators = tuple(o for o in args.operators.split(",") if o)
        unknown = sorted(set(operators) - set(OPERATORS))
        if unknown:
            raise CatalogueError(f"unknown operator(s) {unknown}; known: {', '.join(OPERATORS)}")
        triaged = load_triage(root)
        generated = generate(root, operators)
        if triaged_out is not None:
            triaged_out.update({m.id: (triaged[m.id][0], list(m.requirements))
                                for m in generated if m.id in triaged})
        mechanical = [m for m in generated if m.id not in triaged]
        if args.killed_before is not None:
            try:
                judged = json.loads(args.killed_before.read_text("utf-8"))
            except (OSError, ValueError) as exc:
                raise CatalogueError(f"--killed-before {args.killed_before}: {exc}") from None
            # a kill by project tests (a [[tested]] triage) is no kill of a --suites-only run
            killed = {r["id"] for r in judged.get("mutants", [])
                      if r.get("status") in ("killed", "killed (hang)")
                      and not (args.suites_only and r.get("phase") == "tests")}
            mechanical = [m for m in mechanical if m.id in killed]
        mutants += mechanical
    return mutants


def judge_with_journal(chosen: list[Mutant], cfg: Config, root: Path, jobs: int,
                       journal: Journal | None) -> list[Result]:
    """``run_all`` over what the journal has not judged yet; its results and the journal's,
    in ``chosen``'s order."""
    if journal is None:
        return run_all(chosen, cfg, root, jobs)
    todo = [m for m in chosen if m.id not in journal.done]
    functions = {m.id: m.function for m in chosen}
    prior = [(r.id, functions[r.id], r.killed_by) for r in journal.done.values()
             if r.id in functions and r.killed and r.phase == "suites" and r.killed_by]
    journal.open()
    try:
        fresh = run_all(todo, cfg, root, jobs, on_result=journal.record,
                        prior=prior) if todo else []
    finally:
        journal.close()
    got = {**journal.done, **{r.id: r for r in fresh}}
    return [got[m.id] for m in chosen]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/mutants.py",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-j", "--jobs", type=int, default=2, help="mutants run at once (default 2)")
    p.add_argument("--sample", type=int, default=None, metavar="N",
                   help="run N mutants drawn with --seed (a rotating sample)")
    p.add_argument("--seed", type=int, default=None,
                   help="drives the sample and the suites' --mc-seed (default: random, printed)")
    p.add_argument("--per-requirement", type=int, default=None, metavar="N",
                   help="draw N mutants per requirement with --seed (a stratified sample: every "
                        "requirement judged, none drowning the others)")
    p.add_argument("--only", default="", help="comma-separated mutant ids")
    p.add_argument("--family", default="", help="comma-separated families: MR,CO,MP")
    p.add_argument("--suites-only", action="store_true",
                   help="judge with the conformance suites alone (no project tests)")
    p.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE,
                   help=f"seconds per mutant before its run counts as a hang "
                        f"(default {DEFAULT_DEADLINE:.0f}; a mutant may set its own)")
    p.add_argument("--confirm", action="store_true",
                   help="re-run each killing test on the unmutated tree; a kill by a test that "
                        "fails there too is reported UNCONFIRMED")
    p.add_argument("--json", type=Path, default=Path("mutants-result.json"),
                   help="where to write the JSON result (default mutants-result.json)")
    p.add_argument("--journal", type=Path, default=None, metavar="FILE.jsonl",
                   help="record each judged mutant as it comes and skip those an earlier run "
                        "with this journal judged (same seed, --suites-only and deadline; the "
                        "seed defaults to the journal's): a long run resumes where it stopped")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="keep each mutant's scratch tree and log under DIR")
    p.add_argument("--catalogue", type=Path, default=ROOT / "mutants",
                   help="directory of *.toml mutant files (default mutants/)")
    p.add_argument("--source", choices=("curated", "mechanical", "all"), default="curated",
                   help="which mutants: the curated catalogue (default), the mechanical ones "
                        "generated over mutants/mechanical/scope.toml, or both")
    p.add_argument("--killed-before", type=Path, default=None, metavar="RESULT.json",
                   help="keep only the mechanical mutants a stored run (its --json result, e.g. "
                        "mutants/mechanical/judged.json) judged killed: a regression check of "
                        "detection, as CI's sample does, while untriaged survivors await tests")
    p.add_argument("--operators", default=",".join(OPERATORS),
                   help=f"mechanical operators to generate (default all: {','.join(OPERATORS)})")
    p.add_argument("--root", type=Path, default=ROOT, help="repository to mutate (default: this)")
    p.add_argument("--python", default=None,
                   help="interpreter with the project and its dependencies installed "
                        "(default: the repository's .venv/bin/python if there is one, else "
                        "this one)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the baseline run (the judging suites and tests on the unmutated "
                        "tree, which must pass before any kill counts)")
    p.add_argument("--reach", type=Path, default=None, metavar="MAP.json",
                   help="run each mechanical mutant's suites tests that execute its function "
                        "only, the tests that killed that function's other mutants first; the "
                        "map comes from one instrumented run of the scope's suites, kept in "
                        "MAP.json and made again when the tree, seed or scope changed "
                        "(docs/mutation.md, 'The reach map')")
    p.add_argument("--check", action="store_true",
                   help="only check that every patch applies and compiles")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = args.root.resolve()
    reqs = known_requirements(root) if (root / "pytest_mooncake").is_dir() else None
    triaged: dict[str, tuple[str, list[str]]] = {}
    try:
        mutants = load_mutants(args, root, reqs, triaged)
        beyond_tested = (load_tested_beyond(root) if args.source != "curated"
                         else frozenset())
        if args.journal is not None and args.seed is None:
            args.seed = (Journal.stored_settings(args.journal) or {}).get("seed")
    except (CatalogueError, JournalError) as exc:
        print(f"mutants: {exc}", file=sys.stderr)
        return 2
    problems = check(mutants, root)
    if problems:
        print("mutants: the catalogue does not apply to this tree:\n  " + "\n  ".join(problems),
              file=sys.stderr)
        return 2
    if args.check:
        print(f"mutants: {len(mutants)} mutants, every patch applies and compiles")
        return 0
    if args.list:
        for m in mutants:
            print(f"{m.id:44} {','.join(m.requirements):14} {m.kind:13} {m.breaks[:60]}")
        return 0
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    chosen = select(mutants, [s for s in args.only.split(",") if s],
                    [s.upper() for s in args.family.split(",") if s], args.sample, seed,
                    args.per_requirement)
    if not chosen:
        print("mutants: nothing selected", file=sys.stderr)
        return 2
    journal = None
    if args.journal is not None:
        try:
            journal = Journal(args.journal, {"seed": seed, "suites_only": args.suites_only,
                                             "deadline": args.deadline}, tree_commit(root))
        except JournalError as exc:
            print(f"mutants: {exc}", file=sys.stderr)
            return 2
        before = [journal.done[m.id] for m in chosen if m.id in journal.done]
        commits = sorted({journal.commits[r.id] for r in before} - {""})
        print(f"mutants: journal {args.journal}: {len(before)} of {len(chosen)} judged before"
              + (f" (at {', '.join(commits)})" if commits else "")
              + (f"; {journal.dropped} line(s) cut short or ERROR, judged again"
                 if journal.dropped else ""), flush=True)
    python = args.python or default_python(root)
    cfg = Config(python, seed, args.deadline, args.suites_only, args.confirm,
                 args.keep.resolve() if args.keep else None, baseline=not args.no_baseline,
                 reach=args.reach.resolve() if args.reach else None,
                 scope=load_scope(root) if args.reach else {})
    print(f"mutants: {len(chosen)} of {len(mutants)} mutants, seed {seed}, {args.jobs} at a time, "
          f"deadline {args.deadline:.0f}s, judged by the suites"
          + ("" if args.suites_only else " then the project tests"), flush=True)
    print(f"mutants: interpreter {python}", flush=True)
    try:
        results = judge_with_journal(chosen, cfg, root, args.jobs, journal)
    except BaselineFailed as exc:
        print(f"mutants: {exc}", file=sys.stderr)
        return 2
    print()
    print(table(results))
    if args.source != "curated":
        print("\nper requirement (triaged mutants are counted, not run):")
        print(requirement_table(results, {k: v for k, v in triaged.items()
                                          if set(v[1]) & {r for m in chosen
                                                          for r in m.requirements}},
                                beyond_tested))
    s = summary(results, beyond_tested)
    print(f"\nsuites alone: {s['killed_by_suites']}/{s['judged']} killed "
          f"({s['suite_kill_rate']}%)")
    if s["beyond_held_by_tests"]:
        print(f"suites alone, beyond-requirements [[tested]] mutants set aside: "
              f"{s['killed_by_suites']}/{s['judged'] - s['beyond_held_by_tests']} killed "
              f"({s['suite_kill_rate_of_requirements']}%)")
    if not args.suites_only:
        print(f"suites + project tests: {s['killed']}/{s['judged']} killed ({s['kill_rate']}%)")
    if s["errors"]:
        print(f"errors (not judged): {s['errors']}")
    doc = {"seed": seed, "jobs": args.jobs, "deadline": args.deadline,
           "suites_only": args.suites_only, "catalogue": str(args.catalogue),
           "summary": s, "mutants": [asdict(r) for r in results]}
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"JSON result: {args.json}")
    return 0 if s["survived"] == 0 and s["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
