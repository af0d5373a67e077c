"""The fault ledger: durable before a fault is applied, folded per fault, tolerant of a torn last
line (a writer SIGKILLed mid-append), strict about anything else."""

from __future__ import annotations

import pytest

from pytest_mooncake.nodes.ledger import Ledger, LedgerError


def test_fold_and_outstanding(tmp_path):
    ledger = Ledger(tmp_path / "c.toml.ledger")
    assert ledger.entries() == []
    a = ledger.begin("run1", {"kind": "partition", "node": "n2"})
    b = ledger.begin("run2", {"kind": "pause", "node": "n1", "component": "engine-n1"})
    assert [e.id for e in ledger.outstanding()] == [a, b]  # durable before anything is applied
    ledger.mark(a, "applied")
    ledger.mark(b, "applied")
    ledger.mark(a, "healed", note="removed")
    assert [e.id for e in ledger.outstanding()] == [b]
    assert ledger.outstanding("run1") == []
    entry = next(e for e in ledger.entries() if e.id == a)
    assert entry.history == ["applying", "applied", "healed"] and entry.note == "removed"
    ledger.mark(b, "healed")
    assert ledger.outstanding() == [] and len(ledger.entries()) == 2  # history is kept


def test_torn_last_line_is_ignored_but_garbage_is_not(tmp_path):
    ledger = Ledger(tmp_path / "l")
    a = ledger.begin("r", {"kind": "down", "node": "n1", "component": "c"})
    with open(ledger.path, "a") as f:
        f.write('{"id": "fdead", "sta')
    assert [e.id for e in ledger.outstanding()] == [a]
    with open(ledger.path, "a") as f:
        f.write('\n{"id": "x", "state": "applied"}\n')
    with pytest.raises(LedgerError, match=r"l:2: not a ledger record"):
        ledger.entries()


def test_unwritable_ledger_names_the_setting(tmp_path):
    (tmp_path / "a-file").write_text("")
    ledger = Ledger(tmp_path / "a-file" / "sub" / "l")
    with pytest.raises(LedgerError, match=r"set \[faults\]\.ledger to a writable path"):
        ledger.begin("r", {"kind": "down"})
