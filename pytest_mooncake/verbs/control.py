"""Client of the completion-control socket of one process running on emulated devices.

Every process that opens an emulated device listens on a unix socket (``MC_VERBS_CONTROL``,
by default ``<run dir>/ctl/<pid>.sock``). Through it a test holds the completions of chosen
work requests, releases them in a chosen order or with a chosen error status, fails QPs,
injects async events, takes ports down and reads counters::

    ctl = VerbsControl(fabric.control_socket(pid))
    rule = ctl.hold(qp=0x101, opcode="write")          # the next write's completion
    (held,) = ctl.wait_held(1, timeout=10)             # bytes have landed, the CQE waits
    ctl.fail_qp(0x101)                                 # QP to ERR + IBV_EVENT_QP_FATAL
    ctl.release([held.id])                             # a stale success arrives late

Holds live in the process under test: when it dies, nothing it held survives, and every call
here raises ``ProcessGone``.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

STAGES = ("completion", "execution")


class VerbsControlError(RuntimeError):
    """The process answered with an error, or could not be asked; the message says which."""


class ProcessGone(VerbsControlError):
    """Nobody listens on the socket: the process exited or died (and its held state with it)."""


def _value(text: str) -> Any:
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    try:
        return int(text, 0)
    except ValueError:
        return text


def parse_fields(line: str) -> tuple[str, dict[str, Any]]:
    """``held id=3 qp=257 reason="a b"`` -> ("held", {"id": 3, "qp": 257, "reason": "a b"})."""
    kind, _, rest = line.partition(" ")
    out: dict[str, Any] = {}
    key = None
    for token in rest.split(" "):
        if key is not None:  # inside a quoted value
            out[key] += " " + token
            if token.endswith('"'):
                out[key] = out[key][1:-1]
                key = None
            continue
        k, eq, v = token.partition("=")
        if not eq:
            continue
        if v.startswith('"') and not (len(v) > 1 and v.endswith('"')):
            out[k], key = v, k
        else:
            out[k] = _value(v)
    return kind, out


@dataclass(frozen=True)
class Reply:
    """A successful answer: the fields of its ``ok`` line and its data lines, in order."""

    fields: dict[str, Any]
    lines: list[tuple[str, dict[str, Any]]]
    raw: list[str]  # the reply as the process wrote it (without the closing "end")


def _from(cls, data: dict[str, Any], **renames: str):
    names = {f.name for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        key = renames.get(key, key)
        if key in names:
            kwargs[key] = value
    return cls(**kwargs)


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    seed: int
    chaos: str
    socket: str
    devices: tuple[str, ...]
    version: int = 1


@dataclass(frozen=True)
class HoldRule:
    id: int
    stage: str
    dev: str
    qp: int
    opcode: str
    nth: int
    count: int
    matched: int
    taken: int
    peer: int = 0
    wr_id: int | None = None
    addr_lo: int | None = None
    addr_hi: int | None = None
    errno: int | None = None  # a refuse rule's errno
    fail: str | None = None  # a fail rule's status


@dataclass(frozen=True)
class HeldCompletion:
    """A held WR: stage ``completion`` (executed, CQE parked; ``status`` is what it would carry)
    or ``execution`` (stalled before execution, its QP's send queue waiting behind it)."""

    id: int
    stage: str
    rule: int  # 0: held by chaos mode, released by time
    dev: str
    qp: int
    wr_id: int
    opcode: str
    seq: int
    status: str | None = None
    cq: str | None = None  # "alive", or "destroyed" (releasing it then drops it)
    laddr: int = 0  # the WR's first local address
    chaos: int = 0


@dataclass(frozen=True)
class QpCounters:
    qpn: int
    dev: str
    state: str
    dest_qpn: int
    cq: int
    posted: int  # WRs ibv_post_send accepted
    executed: int  # WRs whose outcome is decided (data moved, or failed)
    completed: int  # send-queue slots retired by polled completions
    outstanding: int  # posted - completed: slots in use
    pending: int  # WRs not executed yet (chaos delay, stalled hold)
    held: int
    cqes: int  # completions generated (held ones included)
    flushed: int
    errors: int
    bytes: int
    peer: int = 0  # pid of the process owning the remote QP (0: none, or it is gone)
    posted_in_err: int = 0  # WRs posted while the QP was already in ERR
    posted_after_retire: int = 0  # of those, after the application moved it to ERR itself
    app_err: int = 0  # 1: the application moved the QP to ERR itself (ibv_modify_qp)


@dataclass(frozen=True)
class PostedWr:
    """One entry of a process's post log: a WR ibv_post_send was handed."""

    n: int  # 1, 2, ...: posting order in the process
    qp: int
    dev: str
    peer: int  # pid of the process owning the remote QP then (0: none)
    wr_id: int
    opcode: str
    laddr: int
    length: int
    raddr: int
    rkey: int
    tid: int  # the posting thread
    qp_state: str  # the QP's state at that moment ("err": it flushed at once)
    refused: int = 0  # returned as bad_wr (a refuse rule, or a full send queue)


@dataclass(frozen=True)
class ThreadActivity:
    """What one thread of the process did on the NIC: WRs posted, CQ polls and completions,
    and which CQs (by id) it polled."""

    tid: int
    name: str
    posted: int
    refused: int
    polls: int
    polled: int
    cqs: tuple[int, ...] = ()


@dataclass(frozen=True)
class RetiredQp:
    """A QP the process destroyed, with what was still outstanding on it at that moment."""

    qpn: int
    dev: str
    peer: int
    state: str
    posted: int
    completed: int
    outstanding: int
    held: int
    posted_in_err: int
    posted_after_retire: int
    app_err: int  # the application had moved it to ERR itself before destroying it
    err_ms_before: int  # ms between entering ERR and destruction (-1: never in ERR)
    destroyed_ms_ago: int
    tid: int


@dataclass(frozen=True)
class CqCounters:
    id: int
    dev: str
    capacity: int
    queued: int  # completions in the CQ, not polled yet
    pushed: int
    polled: int
    overruns: int
    held: int
    qps: int
    posted: int
    completed: int
    outstanding: int


@dataclass(frozen=True)
class Counters:
    qps: dict[int, QpCounters]
    cqs: dict[int, CqCounters]
    posted: int
    completed: int
    outstanding: int
    held: int
    held_ever: int
    cqes: int
    polled: int
    events: int = 0  # async events raised
    acked: int = 0  # async events the application acknowledged


def _wr_filter(device, qp, opcode, wr_id, addr_range=None) -> list[str]:
    args = []
    if device is not None:
        args.append(f"dev={device}")
    if qp is not None:
        args.append(f"qp={int(qp)}")
    if opcode is not None:
        args.append(f"opcode={opcode}")
    if wr_id is not None:
        args.append(f"wr_id={int(wr_id)}")
    if addr_range is not None:
        lo, hi = addr_range
        args += [f"addr_lo={int(lo)}", f"addr_hi={int(hi)}"]
    return args


class VerbsControl:
    """Talks to one process's control socket; thread-safe, reconnects after an error."""

    def __init__(self, path: str | Path, timeout: float = 10.0):
        self.path = str(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = b""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------ transport

    def request(self, line: str, timeout: float | None = None) -> Reply:
        """Send one raw request line; the reply, or ``VerbsControlError`` with its message."""
        if "\n" in line:
            raise ValueError(f"a control request is one line: {line!r}")
        with self._lock:
            try:
                sock = self._connect()
                sock.settimeout(timeout or self.timeout)
                sock.sendall(line.encode() + b"\n")
                lines = self._read_reply(sock)
            except ProcessGone:
                raise
            except (OSError, VerbsControlError) as exc:
                self._close()
                if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    raise ProcessGone(f"{self.path}: the process went away during {line!r} "
                                      f"({exc}); whatever it held went with it") from None
                if isinstance(exc, socket.timeout):
                    raise VerbsControlError(f"{self.path}: no reply to {line!r} within "
                                            f"{timeout or self.timeout:g} s") from None
                raise
        status, first = lines[0].partition(" ")[::2]
        if status != "ok":
            raise VerbsControlError(f"{self.path}: {line!r} failed: {first}")
        return Reply(parse_fields(lines[0])[1], [parse_fields(x) for x in lines[1:]], lines)

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                raise ProcessGone(f"{self.path}: no process listens ({exc.strerror}): it exited "
                                  f"or died, and nothing it held survives") from None
            self._sock, self._buf = sock, b""
        return self._sock

    def _read_reply(self, sock: socket.socket) -> list[str]:
        lines: list[str] = []
        while True:
            while b"\n" not in self._buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionResetError("connection closed mid-reply")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\n", 1)
            text = raw.decode(errors="replace")
            if text == "end":
                if not lines:
                    raise VerbsControlError(f"{self.path}: empty reply")
                return lines
            lines.append(text)

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        with self._lock:
            self._close()

    def __enter__(self) -> VerbsControl:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------------------------- queries

    def hello(self) -> ProcessInfo:
        f = dict(self.request("hello").fields)
        f["devices"] = tuple(x for x in str(f.get("devices", "")).split(",") if x)
        return _from(ProcessInfo, f)

    def counters(self) -> Counters:
        reply = self.request("counters")
        qps, cqs, total = {}, {}, {}
        for kind, data in reply.lines:
            if kind == "qp":
                qps[data["qpn"]] = _from(QpCounters, data)
            elif kind == "cq":
                cqs[data["id"]] = _from(CqCounters, data)
            elif kind == "total":
                total = data
        return Counters(qps=qps, cqs=cqs, **{k: total.get(k, 0) for k in (
            "posted", "completed", "outstanding", "held", "held_ever", "cqes", "polled",
            "events", "acked")})

    def posts(self, since: int = 0, limit: int = 0) -> list[PostedWr]:
        """The post log after entry ``since`` (the process keeps the last 8192)."""
        reply = self.request(f"posts since={int(since)} limit={int(limit)}")
        return [_from(PostedWr, d) for kind, d in reply.lines if kind == "post"]

    def logged(self, log: str = "posts") -> int:
        """How many entries the ``posts`` (or ``polls``) log ever had: the ``n`` of its last
        entry, asked without reading the log itself (``since`` past the end)."""
        if log not in ("posts", "polls"):
            raise ValueError(f"log={log!r}: one of posts, polls")
        return int(self.request(f"{log} since={1 << 62} limit=1").fields["total"])

    def threads(self) -> list[ThreadActivity]:
        """Per thread: WRs posted, completions polled and the CQs polled (the worker model,
        from outside)."""
        return [_from(ThreadActivity, {**d, "cqs": tuple(
                    int(i) for i in str(d.get("cqs", "")).split(",") if i)})
                for kind, d in self.request("threads").lines if kind == "thread"]

    def retired(self) -> list[RetiredQp]:
        """The QPs the process destroyed (the last 1024), oldest first."""
        return [_from(RetiredQp, d) for kind, d in self.request("retired").lines
                if kind == "retired"]

    def rules(self) -> list[HoldRule]:
        return [_from(HoldRule, d) for kind, d in self.request("rules").lines if kind == "rule"]

    def held(self) -> list[HeldCompletion]:
        return [_from(HeldCompletion, d) for kind, d in self.request("held").lines
                if kind == "held"]

    def kept_back(self, counters: Counters | None = None) -> dict[int, int]:
        """WRs per QP (by number) the test keeps from completing: the held ones, and on a QP
        an execution-stage hold stalls, every WR not executed yet (RC executes a send queue in
        order, so they wait behind the stalled one). ``counters``: a snapshot just taken."""
        counters = self.counters() if counters is None else counters
        if not counters.held:  # nothing held in the process (either stage): none to ask for
            return {qpn: 0 for qpn in counters.qps}
        stalls = Counter(h.qp for h in self.held() if h.stage == "execution")
        return {qpn: q.held + (max(q.pending - stalls[qpn], 0) if stalls[qpn] else 0)
                for qpn, q in counters.qps.items()}

    # ----------------------------------------------------------------------------- holding

    def hold(self, *, device: str | None = None, qp: int | None = None,
             peer: int | None = None, opcode: str | None = None, wr_id: int | None = None,
             nth: int = 1, count: int = 1, stage: str = "completion",
             addr_range: tuple[int, int] | None = None, fail: str | None = None) -> int:
        """Add a hold rule and return its id. It takes the ``nth`` WR matching the filter, and
        the ones after it up to ``count`` in all (``count=0``: every one from the nth on).
        ``peer`` is the pid of the process at the other end (it follows the QPs an application
        replaces, where ``qp`` names one); ``opcode`` is "write" or "read"; ``stage`` is
        "completion" (the WR executes, its completion waits) or "execution" (the QP's send
        queue stalls at the WR); ``addr_range`` = (lo, hi): only WRs whose first local address
        lies in [lo, hi) (one slice of a transfer); ``fail`` (an error ``ibv_wc_status`` name):
        instead of holding, each taken WR completes at once with that status, unexecuted, and
        its QP goes to ERR, as on hardware."""
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r}: one of {', '.join(STAGES)}")
        args = ["hold", f"stage={stage}", *_wr_filter(device, qp, opcode, wr_id, addr_range),
                f"nth={int(nth)}", f"count={int(count)}"]
        if fail is not None:
            args.append(f"fail={fail}")
        if peer is not None:
            args.append(f"peer={int(peer)}")
        return self.request(" ".join(args)).fields["rule"]

    def refuse(self, *, device: str | None = None, qp: int | None = None,
               peer: int | None = None, opcode: str | None = None, wr_id: int | None = None,
               nth: int = 1, count: int = 1, addr_range: tuple[int, int] | None = None,
               errno: str = "ENOMEM") -> int:
        """A rule making ``ibv_post_send`` stop at the matching WR and return it as ``bad_wr``
        with ``errno`` (as a full send queue does): the WRs before it in the chain are posted,
        it and the ones after it are not. Filters as ``hold``; returns the rule id."""
        args = ["refuse", *_wr_filter(device, qp, opcode, wr_id, addr_range),
                f"nth={int(nth)}", f"count={int(count)}", f"errno={errno}"]
        if peer is not None:
            args.append(f"peer={int(peer)}")
        return self.request(" ".join(args)).fields["rule"]

    def unhold(self, rule: int | str = "all") -> int:
        """Remove a hold rule (or all); held completions stay held. Returns how many went."""
        return self.request(f"unhold rule={rule}").fields["removed"]

    def wait_held(self, count: int = 1, timeout: float = 10.0) -> list[HeldCompletion]:
        """Block until at least ``count`` completions are held (answered by the process itself,
        no polling here); return them. ``VerbsControlError`` names the count at the deadline."""
        self.wait("held", count, timeout)
        return self.held()

    def wait(self, what: str, minimum: int, timeout: float = 10.0) -> int:
        """Block until counter ``what`` (held, posted, completed, cqes, polled, events,
        acked) reaches ``minimum``; return its value."""
        ms = max(1, int(timeout * 1000))
        return self.request(f"wait what={what} min={int(minimum)} timeout_ms={ms}",
                            timeout=timeout + 5).fields["value"]

    def release(self, ids: Iterable[int] | None = None, *, status: str | int | None = None,
                keep_qp: bool = False) -> int:
        """Release held entries in the order of ``ids`` (None: all, oldest first). ``status``
        (an ``ibv_wc_status`` name such as "retry_exc_err", or a number) replaces their status;
        an error status moves the QP to ERR unless ``keep_qp``. Returns how many were released;
        entries whose QP or CQ is gone are dropped, and that raises ``VerbsControlError``."""
        args = ["release", "ids=all" if ids is None else "ids=" + ",".join(str(int(i)) for i in ids)]
        if status is not None:
            args.append(f"status={status}")
        if keep_qp:
            args.append("keep_qp=1")
        reply = self.request(" ".join(args))
        dropped = [d for kind, d in reply.lines if kind == "dropped"]
        if dropped:
            raise VerbsControlError(f"{self.path}: released {reply.fields['released']}, dropped "
                                    + "; ".join(f"{d['id']} ({d['reason']})" for d in dropped))
        return reply.fields["released"]

    # ------------------------------------------------------------------------------- faults

    def fail_qp(self, qpn: int, event: str | None = "qp_fatal") -> None:
        """Move QP ``qpn`` to ERR (its unexecuted WRs flush) and, unless ``event`` is None,
        raise that async event (qp_fatal, qp_req_err, qp_access_err) for it."""
        self.request(f"qp_error qp={int(qpn)} event={event or 'none'}")

    def inject(self, event: str, *, device: str | None = None, qp: int | None = None,
               cq: int | None = None, port: int = 1, gid: str | None = None,
               index: int | None = None) -> None:
        """Raise an async event: "qp_fatal"/"qp_req_err"/"qp_access_err" (qp=; the QP goes to
        ERR), "device_fatal" (device=; its QPs go to ERR, its contexts stop working), "gid_change"
        (device=, port=, and with gid= and index= a new GID table entry, host-wide), "cq_err"
        (cq=), or a port event such as "port_err", "lid_change" (device=, port=; no state
        change: use port_down for that)."""
        args = ["event", f"type={event}", f"port={int(port)}"]
        args += _wr_filter(device, qp, None, None)
        if cq is not None:
            args.append(f"cq={int(cq)}")
        if gid is not None:
            args.append(f"gid={gid}")
        if index is not None:
            args.append(f"index={int(index)}")
        self.request(" ".join(args))

    def port_down(self, device: str, port: int = 1) -> None:
        """Take the port down host-wide: WRs through it fail (retry exceeded), every process
        with the device open gets IBV_EVENT_PORT_ERR (this one before the call returns)."""
        self.request(f"port dev={device} port={int(port)} state=down")

    def port_up(self, device: str, port: int = 1) -> None:
        self.request(f"port dev={device} port={int(port)} state=up")

    def chaos(self, seed: int, *, delay_us: int = 0, reorder: float = 0.0, fail: float = 0.0,
              fail_status: str = "retry_exc_err") -> None:
        """Chaos mode from one seed: each WR waits a random 0..delay_us before executing (order
        per QP kept); with probability ``reorder`` a completion is held back a random time (up
        to delay_us, or 1 ms); with probability ``fail`` a WR fails with ``fail_status``."""
        self.request(f"chaos seed={int(seed)} delay_us={int(delay_us)} reorder={reorder!r} "
                     f"fail={fail!r} fail_status={fail_status}")

    def chaos_off(self) -> None:
        self.request("chaos off")


def describe(items: Sequence[Any]) -> str:
    """One line per item, for failure messages."""
    return "\n".join(f"  {item}" for item in items) or "  (none)"
