"""The fenced code blocks of the docs pages and the README, as examples a test can run.

A fence says what it is (docs/about.md, "Every example runs"): ```` ```bash ```` and
```` ```python ```` run; ```` ```{.bash .no-run} ```` and ```` ```{.python .no-run} ```` are
only parsed; ``text``, ``json``, ``toml`` are output or data. Anything else is a problem the
test names with its page and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = frozenset({"bash", "python"})
DATA = frozenset({"text", "json", "toml"})
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`\n]*)\n(?P<body>.*?)"
                   r"^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S)
ATTRS = re.compile(r"^\{\s*\.(?P<lang>[\w-]+)(?P<classes>(\s+\.[\w-]+)*)\s*\}$")


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    lang: str
    runs: bool
    body: str
    info: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_test_file(self) -> bool:
        return self.lang == "python" and re.search(r"^def test_", self.body, re.M) is not None


def pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def parse_info(info: str) -> tuple[str, bool]:
    """(language, runs) of a fence's info string; language "" when it names none."""
    info = info.strip()
    found = ATTRS.match(info)
    if found:
        return found.group("lang"), ".no-run" not in found.group("classes").split()
    return (info.split()[0] if info else ""), True


def examples(path: Path) -> list[Example]:
    text = path.read_text()
    out = []
    for found in FENCE.finditer(text):
        lang, runs = parse_info(found.group("info"))
        indent = found.group("indent")
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in found.group("body").splitlines(keepends=True))
        out.append(Example(path.relative_to(ROOT).as_posix(), text.count("\n", 0, found.start()) + 1,
                           lang, runs and lang in CODE, body, found.group("info").strip()))
    return out


def all_examples() -> list[Example]:
    return [e for page in pages() for e in examples(page)]


def problem(example: Example) -> str | None:
    """Why a fence does not say what it is, or None."""
    if example.lang in CODE or example.lang in DATA:
        return None
    if not example.lang:
        return (f"{example.id}: a fence without a language; say ```bash, ```python (they run), "
                f"```{{.bash .no-run}} or ```text")
    return (f"{example.id}: fence language {example.info!r} is neither run nor data; use bash "
            f"or python (run, or {{.LANG .no-run}}) or one of {sorted(DATA)}")
