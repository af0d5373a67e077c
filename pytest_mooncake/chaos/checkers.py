"""Checkers: judge a history after the run, each for one property.

Every checker takes a ``History`` (or a list of ``Op``) and returns a ``CheckResult``: ``valid``
is True, False, or None (*unknown*) when the history cannot decide: no final read, or nothing
to judge at all (no acknowledged write, no replacement, no heal). A checker that judged nothing
says so; ``Verdict.assert_valid`` fails on unknown as on invalid. ``explanation`` names the
offending operations; ``ops`` holds them. Checkers are sound and partial: a reported
violation is a real one under the model below; they do not search for linearizations.

Operation vocabulary (``f``), values and keys:

- key-value: ``put`` (key, value written), ``get`` (key; ok value = value read, None when
  absent), ``remove`` (key), ``scan`` (ok value = ``{key: value}`` of every present key).
  Values written are unique (the generators make them so).
- transfers: ``write``/``read`` with key = ``"<segment>/<slot>"`` (a register in a peer's
  buffer), value = the data; a completion's ``instance``, when the client knows it, names the
  incarnation of the peer that served it. Final reads read the current incarnation's memory.
- descriptors: ``publish`` (key = segment, value = descriptor written) and ``descriptor``
  (ok value = descriptor observed).
- faults: process ``"nemesis"``, ``f`` = ``inject``/``heal``, key = what the fault acts on; a
  completion carrying ``instance`` announces the new incarnation of that subject.

A ``fail`` completion means the operation certainly did not happen; ``info`` (or none) means it
may take effect at any time after its invoke.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_mooncake.chaos.history import NEMESIS, Call, History, Op, pair

PUT, GET, REMOVE, SCAN = "put", "get", "remove", "scan"
WRITE, READ = "write", "read"
PUBLISH, DESCRIPTOR = "publish", "descriptor"
INJECT, HEAL = "inject", "heal"
ANNOUNCES = ("start", "restart", "replace")
"""Worker ops whose completion ``instance`` announces a new incarnation (besides the nemesis')."""
MAX_LISTED = 10

Checker = Callable[[History | Iterable[Op]], "CheckResult"]


@dataclass(frozen=True)
class CheckResult:
    name: str
    valid: bool | None
    explanation: str
    ops: tuple[Op, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        verdict = {True: "valid", False: "INVALID", None: "unknown"}[self.valid]
        return f"{self.name}: {verdict}: {self.explanation}"


@dataclass(frozen=True)
class Verdict:
    """Several checkers' results over one history."""

    results: tuple[CheckResult, ...]

    @property
    def valid(self) -> bool | None:
        if any(r.valid is False for r in self.results):
            return False
        if any(r.valid is None for r in self.results):
            return None
        return True

    @property
    def explanation(self) -> str:
        return "\n".join(str(r) for r in self.results)

    def __getitem__(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def assert_valid(self) -> None:
        """Raise AssertionError naming every invalid or undecided property."""
        if self.valid is not True:
            bad = [str(r) for r in self.results if r.valid is not True]
            raise AssertionError("history checks did not pass:\n" + "\n".join(bad))


def check(history: History | Iterable[Op], *checkers: Checker) -> Verdict:
    """Run several checkers over one history."""
    ops = _ops(history)
    return Verdict(tuple(c(ops) for c in checkers))


def _ops(history: History | Iterable[Op]) -> list[Op]:
    return history.ops if isinstance(history, History) else list(history)


def _listing(lines: Sequence[str]) -> str:
    shown = "\n  ".join(lines[:MAX_LISTED])
    more = f"\n  ... and {len(lines) - MAX_LISTED} more" if len(lines) > MAX_LISTED else ""
    return f"\n  {shown}{more}"


def _ops_of(calls: Iterable[Call]) -> tuple[Op, ...]:
    seen: dict[int, Op] = {}
    for c in calls:
        for op in c.ops:
            seen[op.index] = op
    return tuple(seen[i] for i in sorted(seen))


# ------------------------------------------------------------------ observations


@dataclass(frozen=True)
class _Observation:
    read: Call
    key: Any
    value: Any


def _observations(calls: list[Call], reads: Sequence[str], scans: Sequence[str],
                  keys: Iterable[Any]) -> list[_Observation]:
    """What each ok read saw, per key; a scan observes every known key (absent = None)."""
    keys = list(keys)
    out = []
    for c in calls:
        if not c.ok:
            continue
        if c.f in reads:
            out.append(_Observation(c, c.key, c.result))
        elif c.f in scans:
            seen = c.result if isinstance(c.result, dict) else {}
            out.extend(_Observation(c, k, seen.get(k)) for k in keys)
            out.extend(_Observation(c, k, v) for k, v in seen.items() if k not in keys)
    return out


# ------------------------------------------------------------------ no lost acknowledged put


def no_lost_acks(history: History | Iterable[Op], final_only: bool = True,
                 puts: Sequence[str] = (PUT,), removes: Sequence[str] = (REMOVE,),
                 reads: Sequence[str] = (GET,), scans: Sequence[str] = (SCAN,)) -> CheckResult:
    """Every put acknowledged before a read began is seen by that read, unless a later (or
    concurrent) write explains what the read saw. ``final_only`` judges only final reads
    (``final=True``: the post-heal phase); otherwise every read is judged, which also
    catches stale reads during the run."""
    name = "no-lost-acks" if final_only else "no-stale-reads"
    calls = pair(_ops(history))
    writes: dict[Any, list[Call]] = defaultdict(list)
    for c in calls:
        if (c.f in puts or c.f in removes) and not c.failed:
            writes[c.key].append(c)
    observations = [o for o in _observations(calls, reads, scans, writes)
                    if not final_only or o.read.final]
    if final_only and not observations:
        acked = [c for k in writes for c in writes[k] if c.ok and c.f in puts]
        if acked:
            return CheckResult(name, None, f"no final read in the history, so "
                               f"{len(acked)} acknowledged put(s) cannot be judged")
        return CheckResult(name, None, "nothing to judge: no acknowledged put and no final read")

    # A read r that saw v misses an acknowledged put p (p ended before r began) unless some
    # write q producing v (a put of v; a remove when v is None) may come after p and before
    # r: q.end > p.start and q.start < r.end. With M = max q.end over the producers that
    # began before r ended, p is missed exactly when p.start >= M.
    producers: dict[tuple[Any, str], _Producers] = defaultdict(_Producers)
    acked: dict[Any, _Producers] = defaultdict(_Producers)
    for k, ws in writes.items():
        for w in ws:
            canon = _canon(w.argument) if w.f in puts else _ABSENT
            producers[(k, canon)].add(w)
            if w.ok and w.f in puts:
                acked[k].add(w)
    violations: list[tuple[Call, Call, Any]] = []
    for obs in observations:
        canon = _ABSENT if obs.value is None else _canon(obs.value)
        if obs.value is not None and (obs.key, canon) not in producers:
            continue  # a phantom: no-phantom-reads reports it
        r = obs.read
        latest = producers[(obs.key, canon)].max_end_starting_before(r.end) \
            if (obs.key, canon) in producers else -math.inf
        candidates = acked[obs.key].starting_between(latest, r.start) if obs.key in acked else ()
        for p in candidates:
            if p.end < r.start:
                violations.append((p, r, obs.value))

    unread = []
    if final_only:
        read_keys = {o.key for o in observations}
        unread = [k for k, ws in writes.items()
                  if k not in read_keys and any(w.ok and w.f in puts for w in ws)]

    if violations:
        if final_only:
            lost: dict[int, tuple[Call, Call, Any]] = {}
            for p, r, v in violations:
                lost.setdefault(p.invoke.index, (p, r, v))
            lines = [f"acknowledged {p.f} {p.key}={p.argument!r} ({p.invoke.describe()}, "
                     f"ok #{p.completion.index}) is lost: final read #{r.completion.index} "
                     f"saw {v!r}" for p, r, v in lost.values()]
            text = f"{len(lost)} acknowledged put(s) lost:" + _listing(lines)
        else:
            stale: dict[int, tuple[Call, Call, Any]] = {}
            for p, r, v in violations:
                stale.setdefault(r.invoke.index, (p, r, v))
            lines = [f"read #{r.completion.index} of {r.key if r.f in reads else 'scan'} "
                     f"saw {v!r} although {p.f} {p.key}={p.argument!r} was acknowledged "
                     f"(#{p.completion.index}) before the read began"
                     for p, r, v in stale.values()]
            text = f"{len(stale)} stale read(s):" + _listing(lines)
        involved = [c for p, r, _ in violations for c in (p, r)]
        return CheckResult(name, False, text, _ops_of(involved),
                           {"violations": len(violations)})
    if unread:
        return CheckResult(name, None, f"no final read of key(s) {sorted(map(str, unread))} "
                           f"with acknowledged puts")
    judged = len({o.read.invoke.index for o in observations})
    if not judged or not acked:
        return CheckResult(name, None, f"nothing to judge: {judged} ok read(s), "
                           f"{sum(len(a.calls) for a in acked.values())} acknowledged put(s)")
    return CheckResult(name, True, f"{judged} read(s) saw every acknowledged put")


def no_stale_reads(history: History | Iterable[Op], **kwargs: Any) -> CheckResult:
    """``no_lost_acks`` over every read, not only the final ones."""
    return no_lost_acks(history, final_only=False, **kwargs)


_ABSENT = "\0absent"


class _Producers:
    """Calls sorted by start, with a running maximum of their ends, for bisection."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._starts: list[int] | None = None
        self._max_end: list[float] = []

    def add(self, call: Call) -> None:
        self.calls.append(call)
        self._starts = None

    def _index(self) -> list[int]:
        if self._starts is None:
            self.calls.sort(key=lambda c: c.start)
            self._starts = [c.start for c in self.calls]
            self._max_end = list(itertools.accumulate((c.end for c in self.calls), max))
        return self._starts

    def max_end_starting_before(self, t: float) -> float:
        i = bisect.bisect_left(self._index(), t)
        return self._max_end[i - 1] if i else -math.inf

    def starting_between(self, lo: float, hi: float) -> list[Call]:
        """Calls with lo <= start < hi."""
        starts = self._index()
        return self.calls[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# ------------------------------------------------------------------ values never written


def _never_written(name: str, what: str, history: History | Iterable[Op],
                   writes: Sequence[str], reads: Sequence[str], scans: Sequence[str],
                   diff: bool) -> CheckResult:
    calls = pair(_ops(history))
    versions: dict[Any, list[Call]] = defaultdict(list)
    by_value: dict[tuple[Any, str], list[Call]] = defaultdict(list)
    for c in calls:
        if c.f in writes:
            versions[c.key].append(c)
            by_value[(c.key, _canon(c.argument))].append(c)
    bad: list[tuple[_Observation, str]] = []
    for obs in _observations(calls, reads, scans, versions):
        if obs.value is None:
            continue
        r = obs.read
        same = by_value.get((obs.key, _canon(obs.value)), [])
        if any(not w.failed and w.start < r.end for w in same):
            continue
        if same and all(w.failed for w in same):
            why = "written only by failed call(s) " + ", ".join(f"#{w.invoke.index}" for w in same)
        elif same:
            why = f"written only after the read completed (#{same[0].invoke.index})"
        else:
            why = "never written"
            if diff:
                why += _version_diffs(obs.value, [w for w in versions.get(obs.key, ())
                                                  if not w.failed])
        bad.append((obs, why))
    if bad:
        lines = [f"read #{o.read.completion.index} of {o.key} saw {_short(o.value)}: {why}"
                 for o, why in bad]
        involved = [o.read for o, _ in bad]
        return CheckResult(name, False, f"{len(bad)} {what}:" + _listing(lines),
                           _ops_of(involved))
    judged = sum(o.value is not None for o in _observations(calls, reads, scans, versions))
    if not judged:
        return CheckResult(name, None, "nothing to judge: no ok read saw a value")
    return CheckResult(name, True, f"every value read had been written ({judged} judged)")


def no_phantom_reads(history: History | Iterable[Op], puts: Sequence[str] = (PUT,),
                     reads: Sequence[str] = (GET,), scans: Sequence[str] = (SCAN,)
                     ) -> CheckResult:
    """No read returns a value that no (non-failed, already invoked) put wrote."""
    return _never_written("no-phantom-reads", "read(s) of a value never written", history,
                          puts, reads, scans, diff=False)


def no_torn_descriptors(history: History | Iterable[Op], publishes: Sequence[str] = (PUBLISH,),
                        observes: Sequence[str] = (DESCRIPTOR,)) -> CheckResult:
    """Every observed descriptor equals one published version of that segment (whole, not a
    mix of two versions, not truncated)."""
    return _never_written("no-torn-descriptors", "torn or unpublished descriptor(s)", history,
                          publishes, observes, (), diff=True)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _version_diffs(observed: Any, versions: list[Call]) -> str:
    """Which fields the observed value differs in from each published version (a torn value
    matches each version in some fields and differs in others)."""
    if not isinstance(observed, dict):
        return ""
    parts = []
    for w in versions[-MAX_LISTED:]:
        if isinstance(w.argument, dict):
            keys = set(w.argument) | set(observed)
            fields = sorted(k for k in keys
                            if _canon(w.argument.get(k)) != _canon(observed.get(k)))
            parts.append(f"from #{w.invoke.index} in {', '.join(fields)}")
    return f" (differs {'; '.join(parts)})" if parts else ""


# ------------------------------------------------------------------ replacement


def segment_of(key: Any) -> Any:
    """The segment a transfer key addresses (``"A/3"`` -> ``"A"``)."""
    return key.rsplit("/", 1)[0] if isinstance(key, str) and "/" in key else key


def transfers_reach_new_instance(history: History | Iterable[Op],
                                 writes: Sequence[str] = (WRITE,),
                                 reads: Sequence[str] = (READ,)) -> CheckResult:
    """Transfers invoked after a replacement of their peer was announced (a completed op of
    the nemesis, or a ``start``/``restart``/``replace``, carrying the new ``instance``, keyed
    by the segment) reach the new incarnation. Two kinds of evidence:

    - a transfer's completion names the ``instance`` that served it: it must be the one
      announced last before the transfer began, or a later one;
    - reads of the peer's memory (remote reads, and final reads of its own memory): a read
      that began after replacement *i* and ended before the kill that led to replacement
      *i+1* sees every write acknowledged since replacement *i*, unless a later write
      explains what it saw. Writes before a replacement are gone with the old process and
      are not judged; reads that overlap a kill are not judged.
    """
    name = "transfers-reach-new-instance"
    ops = _ops(history)
    calls = pair(ops)
    transfers = tuple(writes) + tuple(reads)
    announced: dict[Any, list[Call]] = defaultdict(list)
    for c in calls:
        if (c.invoke.process == NEMESIS or c.f in ANNOUNCES) and c.completion is not None \
                and c.completion.instance and not c.failed:
            announced[c.key].append(c)
    bad: list[tuple[Call, Call]] = []
    judged = 0
    for t in calls:
        if t.f not in transfers or not t.ok or t.instance is None:
            continue
        seg = segment_of(t.key)
        before = [a for a in announced.get(seg, ()) if a.completion.time < t.start]
        if not before:
            continue
        judged += 1
        current = max(before, key=lambda a: a.completion.time)
        later = {a.instance for a in announced[seg] if a.start < t.end
                 and a.completion.time >= current.completion.time}
        if t.instance not in later:
            bad.append((t, current))
    lines = [f"{t.f} #{t.invoke.index} to {t.key} was served by instance {t.instance!r}, "
             f"but instance {cur.instance!r} had replaced it (#{cur.completion.index}) "
             f"before the transfer began" for t, cur in bad]
    involved: list[Call] = [c for pair_ in bad for c in pair_]

    missed = 0
    for seg in sorted({segment_of(c.key) for c in calls if c.f in transfers}, key=str):
        for ws, rs in _epochs(ops, calls, seg, announced.get(seg, []), writes, reads):
            lost = no_lost_acks([op for c in ws + rs for op in c.ops], final_only=False,
                                puts=writes, removes=(), reads=reads, scans=())
            if lost.valid is False:
                missed += 1
                lines.append(lost.explanation.split(":", 1)[1].strip()
                             .replace("stale read", "read"))
                involved += [c for c in ws + rs if any(op in lost.ops for op in c.ops)]
    if missed:
        lines.insert(len(bad), "reads of the peer's memory missed writes acknowledged since "
                     "its last replacement (they reached a stale instance, or were lost):")
    if lines:
        return CheckResult(name, False, f"{len(bad)} transfer(s) served by a stale instance, "
                           f"{missed} epoch(s) with missed writes:" + _listing(lines),
                           _ops_of(involved))
    replacements = sum(len(a) for a in announced.values())
    epochs_read = sum(1 for seg in {segment_of(c.key) for c in calls if c.f in transfers}
                      for _ in _epochs(ops, calls, seg, announced.get(seg, []), writes, reads))
    if not replacements or not (judged or epochs_read > 1):
        return CheckResult(name, None, f"nothing to judge: {replacements} replacement(s) "
                           f"announced, {judged} transfer(s) after one named an instance, "
                           f"{epochs_read} incarnation(s) with reads")
    return CheckResult(name, True, f"{replacements} replacement(s); {judged} transfer(s) named "
                       f"the current instance; reads saw every write since the replacement")


def _epochs(ops: list[Op], calls: list[Call], segment: Any, announcements: list[Call],
            writes: Sequence[str], reads: Sequence[str]) -> Iterator[tuple[list[Call], list[Call]]]:
    """Per incarnation of ``segment``: (writes since it began, ok reads within it)."""
    heals = sorted(announcements, key=lambda a: a.completion.time)
    injects = sorted(op.time for op in ops if op.process == NEMESIS and op.f == INJECT
                     and op.type == "invoke" and op.key == segment)
    starts = [-math.inf] + [a.completion.time for a in heals]
    ends = []
    for a in heals:
        kills = [t for t in injects if t <= a.start]
        ends.append(kills[-1] if kills else a.start)
    ends.append(math.inf)
    mine = [c for c in calls if segment_of(c.key) == segment]
    for begin, end in zip(starts, ends, strict=True):
        ws = [c for c in mine if c.f in writes and c.start > begin]
        rs = [c for c in mine if c.f in reads and c.ok and c.start >= begin and c.end < end]
        if rs:
            yield ws, rs


# ------------------------------------------------------------------ recovery


def bounded_recovery(within: float) -> Checker:
    """Every heal is followed, within ``within`` seconds of its completion, by an ok
    operation of a worker (not the nemesis, and not a final read: reading one's own memory
    after the run says nothing about whether the system recovered)."""

    def bounded_recovery_checker(history: History | Iterable[Op]) -> CheckResult:
        name = "bounded-recovery"
        ops = _ops(history)
        heals = [op for op in ops if op.process == NEMESIS and op.f == HEAL and op.type != "invoke"]
        injects = sorted(op.time for op in ops if op.process == NEMESIS and op.f == INJECT
                         and op.type == "invoke")
        oks = sorted(op.time for op in ops
                     if op.process != NEMESIS and op.type == "ok" and not op.final)
        end = max((op.time for op in ops), default=0)
        bound = int(within * 1e9)
        slow, times = [], []
        for heal in heals:
            after = next((t for t in oks if t >= heal.time), None)
            next_inject = next((t for t in injects if t > heal.time), math.inf)
            if after is not None and after - heal.time <= bound:
                times.append((after - heal.time) / 1e9)
                continue
            if next_inject - heal.time < bound and (after is None or after > next_inject):
                continue  # the next fault came first: cannot judge this one
            if after is None and end - heal.time < bound:
                continue  # the history ended first: run with a recovery window to judge it
            gap = "no ok operation afterwards" if after is None else \
                f"first ok operation {(after - heal.time) / 1e9:.3f}s later"
            slow.append((heal, gap))
        worst = max(times, default=0.0)
        if not slow and not times:
            return CheckResult(name, None, f"nothing to judge: {len(heals)} heal(s), none "
                               f"followed by a window of {within}s before the next fault or "
                               f"the end of the history")
        if slow:
            lines = [f"heal #{h.index} of {h.key}: {gap}" for h, gap in slow]
            return CheckResult(name, False, f"{len(slow)} fault(s) not recovered from within "
                               f"{within}s:" + _listing(lines), tuple(h for h, _ in slow),
                               {"worst_seconds": worst})
        return CheckResult(name, True, f"{len(times)} heal(s) recovered; slowest "
                           f"{worst:.3f}s (bound {within}s)", details={"worst_seconds": worst})

    bounded_recovery_checker.__name__ = f"bounded_recovery({within})"
    return bounded_recovery_checker
