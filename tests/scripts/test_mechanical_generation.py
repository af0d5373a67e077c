"""Mechanical mutant generation (scripts/mutation/mechanical.py) on a toy repository: a line a
function holds twice is mutated at each place, under two ids, each patch changing its own line."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from mutation.mechanical import SCOPE, generate  # noqa: E402

TOY = '''\
def outliers(xs):
    n = 0
    for x in xs:
        if x > 9:
            n += 1
        if x < 0:
            n += 1
    return n
'''


def test_a_line_held_twice_is_mutated_at_each_place(tmp_path):
    (tmp_path / "toy.py").write_text(TOY)
    (tmp_path / SCOPE).parent.mkdir(parents=True)
    (tmp_path / SCOPE).write_text('[requirements.R-1]\nfunctions = ["toy.py::outliers"]\n')
    deleted = list(generate(tmp_path, ("delete",)))
    assert len(deleted) == 2, [m.breaks for m in deleted]
    assert len({m.id for m in deleted}) == 2
    patched = []
    for m in deleted:
        (hunk,) = m.hunks
        assert TOY.count(hunk.find) == 1
        patched.append(TOY.replace(hunk.find, hunk.replace))
    changed = [[i for i, (a, b) in enumerate(zip(TOY.splitlines(), p.splitlines(), strict=True))
                if a != b] for p in patched]
    assert sorted(changed) == [[4], [6]]
