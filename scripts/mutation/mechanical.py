"""Mechanical mutants: the small edits nobody writes on purpose, generated over exactly the
functions each requirement maps to (``mutants/mechanical/scope.toml``).

Why our own generator rather than mutmut or cosmic-ray: a mutant here must be judged by the
conformance suites of *its* requirement (``--mc-only``), in a scratch copy of the repository,
after a baseline run, with a deadline: the machinery ``mutation.runner`` already has for the
curated catalogue. mutmut 3 rewrites whole modules into trampolines and runs one test command
for every mutant; cosmic-ray keeps one test command per session database. Both would need a
session per requirement and a second runner. Expressing each mechanical mutant as the curated
catalogue's anchored patch (``Mutant``/``Hunk``) reuses the runner unchanged, keeps the
equivalent-mutant file readable (it names the line before and after), and lets the CI sample
draw from both catalogues with one code path.

The operators are the usual ones (cosmic-ray's and mutmut's core set):

- ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``,
  ``is`` <-> ``is not``;
- ``boolean``: ``and`` <-> ``or``;
- ``negate``: the condition of an ``if``/``while``/``elif``/ternary/``assert`` negated;
- ``constant``: an integer constant ``n`` -> ``n + 1`` and ``n - 1``; ``True`` <-> ``False``;
- ``arith``: ``+`` <-> ``-``, ``*`` -> ``/`` (and back), in augmented assignments too;
- ``delete``: a one-line statement that is a call, an augmented assignment or an assignment
  to an attribute/subscript becomes ``pass``;
- ``return``: ``return X`` -> ``return None`` where X is not already None.

Each mutant's id is ``module~function~operator~hash`` where the hash covers the file, the function,
the original line and the replacement: stable while that line is unchanged, so a triage
(``mutants/mechanical/triage.toml``) keeps applying after unrelated edits.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from mutation.catalogue import CatalogueError, Hunk, Mutant

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCOPE = Path("mutants") / "mechanical" / "scope.toml"
TRIAGE = Path("mutants") / "mechanical" / "triage.toml"
VERDICTS = ("equivalent", "beyond-requirements")
OPERATORS = ("compare", "boolean", "negate", "constant", "arith", "delete", "return")

_COMPARE_SWAPS = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=",
                  ast.NotEq: "==", ast.In: "not in", ast.NotIn: "in", ast.Is: "is not",
                  ast.IsNot: "is"}
_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                 ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
                 ast.IsNot: "is not"}
_ARITH_SWAPS = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"),
                ast.Div: ("/", "*")}


@dataclass(frozen=True)
class Edit:
    """One mechanical change to one source line: ``line`` (1-based) of ``file`` becomes
    ``new_line``."""
    file: str
    function: str
    operator: str
    line: int
    old_line: str
    new_line: str


def load_scope(root: Path) -> dict[str, list[str]]:
    """requirement -> ["file::qualified.function", ...], validated against the tree."""
    path = root / SCOPE
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise CatalogueError(f"no mechanical scope at {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
    scope = {}
    for req, entry in doc.get("requirements", {}).items():
        functions = entry.get("functions", [])
        if not isinstance(functions, list) or not all(isinstance(f, str) and "::" in f
                                                       for f in functions):
            raise CatalogueError(f"{path}: requirement {req}: functions must be a list of "
                                 f"'path.py::qualified.name' strings")
        scope[req] = functions
    return scope


def load_triage(root: Path) -> dict[str, tuple[str, str]]:
    """mutant id -> (verdict, reason) of the survivors triaged by hand: ``equivalent`` (behaves
    as the original) or ``beyond-requirements`` (behaves differently only where no requirement
    says anything: a diagnostic counter, a log line's wording, a bound the requirement allows).
    Both are left out of runs; the second is reported apart from the first."""
    path = root / TRIAGE
    if not path.exists():
        return {}
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
    out = {}
    for raw in doc.get("triaged", []):
        if not raw.get("id") or not raw.get("reason") or raw.get("verdict") not in VERDICTS:
            raise CatalogueError(f"{path}: every [[triaged]] needs id, reason and a verdict of "
                                 f"{' or '.join(VERDICTS)}: {raw!r}")
        if raw["id"] in out:
            raise CatalogueError(f"{path}: {raw['id']} is triaged twice")
        out[raw["id"]] = (raw["verdict"], raw["reason"])
    return out


TESTED_SCOPES = ("requirement", "beyond-requirements")
"""What a ``[[tested]]`` entry's ``scope`` says the mutant changes: a requirement's property no
target shows from outside (the default), or only what no requirement speaks of (a diagnostic
counter, a range or a wording of the reference's own), held by a project test all the same.
The second is set aside from the suites' kill rate like a ``[[triaged]]`` beyond-requirements
entry; both are judged in every run that is not ``--suites-only``."""


def load_tested_beyond(root: Path) -> frozenset[str]:
    """Ids of the ``[[tested]]`` entries whose ``scope`` is ``beyond-requirements``."""
    path = root / TRIAGE
    if not path.exists():
        return frozenset()
    load_tested(root)  # the entries' shape and scopes are checked there
    doc = tomllib.loads(path.read_text("utf-8"))
    return frozenset(raw["id"] for raw in doc.get("tested", [])
                     if raw.get("scope") == "beyond-requirements")


def load_tested(root: Path) -> dict[str, tuple[str, ...]]:
    """mutant id -> the project tests (``tests/`` node ids) that judge it, from the
    ``[[tested]]`` entries of the triage file: survivors of the suites whose property no target
    shows from outside (an engine's internals, its own wire), so a test in ``tests/`` states it.
    ``generate`` attaches them, so a run without ``--suites-only`` judges the mutant by them."""
    path = root / TRIAGE
    if not path.exists():
        return {}
    try:
        doc = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
    out: dict[str, tuple[str, ...]] = {}
    for raw in doc.get("tested", []):
        tests = raw.get("tests")
        if (not raw.get("id") or not raw.get("reason") or not isinstance(tests, list) or not tests
                or not all(isinstance(t, str) and t.startswith("tests/") for t in tests)):
            raise CatalogueError(f"{path}: every [[tested]] needs id, reason and tests (a list "
                                 f"of tests/ node ids): {raw!r}")
        if raw.get("scope", "requirement") not in TESTED_SCOPES:
            raise CatalogueError(f"{path}: {raw['id']}: scope must be "
                                 f"{' or '.join(map(repr, TESTED_SCOPES))} (the default is "
                                 f"'requirement'), not {raw['scope']!r}")
        if raw["id"] in out:
            raise CatalogueError(f"{path}: {raw['id']} is listed under [[tested]] twice")
        out[raw["id"]] = tuple(tests)
    return out


def function_nodes(tree: ast.Module) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[prefix + child.name] = child
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")

    walk(tree, "")
    return found


def _replace_span(line: str, start: int, end: int, text: str) -> str:
    return line[:start] + text + line[end:]


def _edits_of(file: str, qualname: str, func: ast.AST, lines: list[str]) -> list[Edit]:
    """Every single-line edit of the operators above inside ``func`` (its docstring and nested
    definitions' signatures excluded)."""
    edits: list[Edit] = []

    def add(op: str, lineno: int, new_line: str) -> None:
        old = lines[lineno - 1]
        if new_line != old:
            edits.append(Edit(file, qualname, op, lineno, old, new_line))

    def one_line(node: ast.AST) -> bool:
        return getattr(node, "lineno", None) is not None and node.lineno == node.end_lineno

    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and one_line(node):
                op = type(node.ops[0])
                left, right = node.left, node.comparators[0]
                if op in _COMPARE_SWAPS and left.end_lineno == right.lineno == node.lineno:
                    line = lines[node.lineno - 1]
                    gap = line[left.end_col_offset:right.col_offset]
                    word = _COMPARE_TEXT[op]
                    if gap.strip() == word:
                        new_gap = gap.replace(word, _COMPARE_SWAPS[op], 1)
                        add("compare", node.lineno, _replace_span(
                            line, left.end_col_offset, right.col_offset, new_gap))
            elif isinstance(node, ast.BoolOp) and one_line(node):
                line = lines[node.lineno - 1]
                a, b = node.values[0], node.values[1]
                gap = line[a.end_col_offset:b.col_offset]
                word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
                if gap.strip() == word:
                    add("boolean", node.lineno, _replace_span(
                        line, a.end_col_offset, b.col_offset, gap.replace(word, other, 1)))
            elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)) \
                    and one_line(node.test):
                t = node.test
                line = lines[t.lineno - 1]
                seg = line[t.col_offset:t.end_col_offset]
                new = seg[4:] if seg.startswith("not ") and isinstance(t, ast.UnaryOp) \
                    else f"not ({seg})"
                add("negate", t.lineno, _replace_span(line, t.col_offset, t.end_col_offset, new))
            elif isinstance(node, ast.Constant) and one_line(node) \
                    and type(node.value) in (int, bool):
                line = lines[node.lineno - 1]
                seg = line[node.col_offset:node.end_col_offset]
                if isinstance(node.value, bool):
                    add("constant", node.lineno, _replace_span(
                        line, node.col_offset, node.end_col_offset, str(not node.value)))
                elif seg.isdigit():
                    for delta in (1, -1):
                        add("constant", node.lineno, _replace_span(
                            line, node.col_offset, node.end_col_offset,
                            str(node.value + delta)))
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and one_line(node) \
                    and type(node.op) in _ARITH_SWAPS:
                word, other = _ARITH_SWAPS[type(node.op)]
                line = lines[node.lineno - 1]
                if isinstance(node, ast.BinOp):
                    lo, hi = node.left.end_col_offset, node.right.col_offset
                else:
                    lo, hi = node.target.end_col_offset, node.value.col_offset
                    word, other = word + "=", other + "="
                gap = line[lo:hi]
                if gap.strip() == word:
                    add("arith", node.lineno, _replace_span(line, lo, hi,
                                                            gap.replace(word, other, 1)))
        # statement-level operators, on every statement nested in this one
        for node in ast.walk(stmt):
            if not isinstance(node, ast.stmt) or not one_line(node):
                continue
            line = lines[node.lineno - 1]
            indent = line[:len(line) - len(line.lstrip())]
            if line.strip().endswith((":", "\\", ",", "(", "[", "{")) or ";" in line:
                continue
            deletable = (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)) \
                or isinstance(node, ast.AugAssign) \
                or (isinstance(node, ast.Assign)
                    and all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in node.targets))
            if deletable and node.col_offset == len(indent):
                add("delete", node.lineno, f"{indent}pass")
            if isinstance(node, ast.Return) and node.value is not None and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None):
                add("return", node.lineno, f"{indent}return None")
    return edits


def edits_in(root: Path, target: str) -> list[Edit]:
    """The edits of one ``file::qualified.name`` entry of the scope."""
    file, qualname = target.split("::", 1)
    try:
        text = (root / file).read_text("utf-8")
    except FileNotFoundError:
        raise CatalogueError(f"mechanical scope names {file}, which does not exist") from None
    tree = ast.parse(text, file)
    func = function_nodes(tree).get(qualname)
    if func is None:
        raise CatalogueError(f"mechanical scope names {target}: no function {qualname!r} in "
                             f"{file} (renamed? update mutants/mechanical/scope.toml)")
    return _edits_of(file, qualname, func, text.splitlines())


def _anchor(lines: list[str], line: int, old: str, new: str, text: str) -> tuple[str, str]:
    """The smallest run of whole lines ending at ``line`` that occurs once in ``text``."""
    start = line - 1
    while True:
        find = "\n".join(lines[start:line]) + "\n"
        if text.count(find) == 1 and (start == 0 or text.index(find) == 0
                                      or text[text.index(find) - 1] == "\n"):
            replace = "\n".join(lines[start:line - 1] + [new]) + "\n"
            return find, replace
        if start == 0:
            raise CatalogueError(f"no unique anchor for line {line}: {old.strip()!r}")
        start -= 1


def mutant_id(edit: Edit, occurrence: int = 1) -> str:
    """``module~function~operator~hash``: no requirement in it, so widening the scope of a
    function keeps its mutants' ids (and their triage). ``occurrence``: the same edit of a line
    the function holds more than once (two identical ``return`` lines) is the n-th such mutant;
    the first keeps the plain hash."""
    parts = [edit.file, edit.function, edit.old_line.strip(), edit.new_line.strip()]
    if occurrence > 1:
        parts.append(f"occurrence {occurrence}")
    digest = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:8]
    return f"{Path(edit.file).stem}~{edit.function}~{edit.operator}~{digest}"


def generate(root: Path, operators: tuple[str, ...] = OPERATORS) -> list[Mutant]:
    """Every mechanical mutant of the scope, as catalogue ``Mutant``s (source "mechanical"),
    each judged by the suites of all requirements that list its function."""
    scope = load_scope(root)
    owners: dict[str, list[str]] = {}
    for req, targets in scope.items():
        for target in targets:
            owners.setdefault(target, []).append(req)
    tested = load_tested(root)
    mutants: list[Mutant] = []
    seen: dict[str, list[int]] = {}  # plain id -> the lines it was generated at
    texts: dict[str, str] = {}
    for target in sorted(owners):
        reqs = tuple(sorted(owners[target], key=_req_key))
        for edit in edits_in(root, target):
            if edit.operator not in operators:
                continue
            text = texts.setdefault(edit.file, (root / edit.file).read_text("utf-8"))
            find, replace = _anchor(text.splitlines(), edit.line, edit.old_line, edit.new_line,
                                    text)
            lines = seen.setdefault(mutant_id(edit), [])
            if edit.line in lines:
                continue  # the same edit of the same line, generated twice
            lines.append(edit.line)
            mid = mutant_id(edit, len(lines))
            mutants.append(Mutant(
                mid, reqs, "boundary" if edit.operator in ("compare", "constant") else "logic",
                f"mechanical {edit.operator} at {edit.file}:{edit.line} in {edit.function}",
                f"{edit.old_line.strip()}  ->  {edit.new_line.strip()}",
                (Hunk(edit.file, find, replace),), tested.get(mid, ()), ("suites/",), None,
                "mechanical", target))
    return mutants


def _req_key(req: str) -> tuple[str, int]:
    family, _, number = req.partition("-")
    return family, int(number) if number.isdigit() else 0
