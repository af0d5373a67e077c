"""The probe: before any verdict relies on our master RPC client, round-trip it against the
running master. It learns which layout family the master speaks by asking (each family's
arguments, newest first: a master answers arguments it cannot deserialize with coro_rpc's
``invalid_rpc_arguments``), checks every answer's type literal against the declared one, and
says what differs where nothing fits.

``python -m pytest_mooncake.master_rpc.probe RELEASE…`` starts each installed release's
master alone and prints the result.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pytest_mooncake.master_rpc import struct_pack as sp
from pytest_mooncake.master_rpc import type_literal
from pytest_mooncake.master_rpc.client import Answer, MasterRpcClient, RpcError, decode_answer
from pytest_mooncake.master_rpc.frame import RPC_ERRORS
from pytest_mooncake.master_rpc.layouts import ERROR_CODES, LAYOUTS, Layout, expected

INVALID_ARGUMENTS = 4
"""coro_rpc ``errc::invalid_rpc_arguments``: the handler could not deserialize the body."""


@dataclass
class Step:
    call: str
    ok: bool
    detail: str


@dataclass
class ProbeResult:
    address: str
    layout: Layout | None = None
    master_version: str | None = None
    steps: list[Step] = field(default_factory=list)
    differs: list[str] = field(default_factory=list)
    """Per family that did not fit: the call and what the master answered."""
    version_channel: str = ""
    """How a client's version reaches this master, as probed: what it answered to a
    ServiceReady carrying a version string."""
    takes_version: bool = False
    """The master read the version a ServiceReady carried (refused the probe's with a
    Mooncake ErrorCode, or answered another version than to ServiceReady()) instead of
    ignoring it."""

    @property
    def usable(self) -> bool:
        return self.layout is not None

    def lack_reason(self) -> str:
        """Why our client cannot speak to this master (for a ``TargetLacks``)."""
        return (f"the master at {self.address} (ServiceReady: {self.master_version!r}) "
                f"accepted no known master RPC layout: " + "; ".join(self.differs))

    def summary(self) -> str:
        lines = [f"master {self.address}: version {self.master_version!r}, layout "
                 f"{self.layout.name if self.layout else 'none fits'}"]
        lines += [f"  {'ok ' if s.ok else 'BAD'} {s.call}: {s.detail}" for s in self.steps]
        lines += [f"  differs: {d}" for d in self.differs]
        lines.append(f"  client version channel: {self.version_channel}")
        return "\n".join(lines)


def error_name(code) -> str:
    names = {v: k for k, v in ERROR_CODES.items()}
    return names.get(code, str(code)) if isinstance(code, int) else str(code)


def shown(answer: Answer) -> str:
    """An answer for a probe line: the value or ErrorCode, and whether its literal matched."""
    value = f"error {error_name(answer.error)}" if not answer.ok else repr(answer.value)[:160]
    if answer.literal is None:
        literal = "no type literal sent"
    else:
        described = type_literal.describe(type_literal.parse(answer.literal))
        literal = {True: "literal as declared", False: "literal DIFFERS from the declared",
                   None: "literal"}[answer.matches_layout] + f" {described}"
    return f"{value} ({literal})"


def probe(address: str, timeout: float = 5.0, seed: int = 0, write: bool = True
          ) -> ProbeResult:
    """Round-trip ServiceReady, Ping, GetReplicaList of an absent key, PutStart of size 0
    and PutEnd of an absent key (the master deserializes their arguments and answers an
    ErrorCode, storing nothing), and, ``write``, mount, put, get, remove, unmount, against
    the master at ``address``."""
    rng = random.Random(seed)
    result = ProbeResult(address)
    with MasterRpcClient(address, LAYOUTS[-1], timeout) as c:
        ready = c.service_ready()
        result.master_version = ready.value if ready.ok else None
        result.steps.append(Step("ServiceReady", ready.ok and ready.matches_layout is not False,
                                 shown(ready)))
        ping = c.ping((rng.getrandbits(64), rng.getrandbits(64)))
        result.steps.append(Step("Ping", ping.ok and ping.matches_layout is not False,
                                 shown(ping)))
        result.takes_version, result.version_channel = _version_channel(
            c, result.master_version)
    for candidate in reversed(LAYOUTS):
        steps, failure = _round_trip(address, candidate, timeout, rng, write)
        if failure is None:
            result.layout = candidate
            result.steps += steps
            return result
        result.differs.append(f"layout {candidate.name}: {failure}")
    return result


def _version_channel(c: MasterRpcClient, master_version: str | None) -> tuple[bool, str]:
    """Offer the master a client version the only way its handshake could carry one: as an
    argument of ServiceReady, whose handler takes none in every release. A master that
    answers it with a Mooncake ErrorCode, or with another version than ServiceReady()'s, read
    it (a reference master behind ``targets/reference/coro_gateway.py``); one that answers
    as to ServiceReady() ignored it."""
    offered = "0.0.0-probe"
    try:
        raw = c.exchange("ServiceReady", sp.serialize(sp.STR, offered))
    except RpcError as exc:
        seen = f"refused it (coro_rpc {RPC_ERRORS.get(exc.code, exc.code)})"
    else:
        answer = decode_answer("ServiceReady", expected(sp.STR), raw)
        if not answer.ok or answer.value != master_version:
            c.close()  # the connection now carries the offered version
            judged = (f"refused it ({error_name(answer.error)})" if not answer.ok else
                      f"accepted it, answering the version it judged it against "
                      f"{answer.value!r}")
            return True, (f"ServiceReady(version): offered {offered!r}, the master {judged}; "
                          f"ServiceReady() answers {master_version!r}")
        seen = f"ignored it and answered {answer.value!r}"
    return False, (f"none: ServiceReady() takes no argument (offered a version string {offered!r} "
            f"with it, the master {seen}) and answers the master's own version "
            f"{master_version!r}; the release's client compares that with its own "
            f"(master_client.cpp MasterClient::Connect) and the master never learns a "
            f"client's version")


def _round_trip(address: str, layout: Layout, timeout: float, rng: random.Random,
                write: bool) -> tuple[list[Step], str | None]:
    steps: list[Step] = []
    client_id = (rng.getrandbits(64), rng.getrandbits(64))
    segment_id = (rng.getrandbits(64), rng.getrandbits(64))
    key = f"probe-{rng.getrandbits(32):08x}"
    with MasterRpcClient(address, layout, timeout) as c:
        try:
            # calls whose arguments the master must deserialize, answered with an ErrorCode
            # and changing nothing: they settle the layout without writing
            for name, answer, want in (
                    ("GetReplicaList (absent key)", lambda: c.get_replica_list(key),
                     "OBJECT_NOT_FOUND"),
                    ("PutStart (size 0)", lambda: c.put_start(client_id, key, 0),
                     "INVALID_PARAMS"),
                    ("PutEnd (absent key)", lambda: c.put_end(client_id, key),
                     "OBJECT_NOT_FOUND")):
                got = answer()
                steps.append(Step(name, error_name(got.error) == want, shown(got)))
            # asked again for its raw bytes: does the answer carry a compatible section?
            sections = sp.read_header(c.get_replica_list(key).raw).total is not None
            if sections != layout.compatible_answers:
                return steps, (f"the master's GetReplicaList answer "
                               f"{'carries' if sections else 'has no'} compatible-member "
                               f"section, family {layout.name}'s "
                               f"{'has' if layout.compatible_answers else 'has none'}")
            if not write:
                bad = [s for s in steps if not s.ok]
                return steps, (None if not bad else f"{bad[0].call}: {bad[0].detail}")
            segment = {"id": segment_id, "name": f"probe-seg-{segment_id[0]:x}",
                       "base": 0x7F0000000000, "size": 16 << 20,
                       "te_endpoint": f"127.0.0.1:{40000 + rng.randrange(20000)}"}
            for name, answer in (
                    ("MountSegment", lambda: c.mount_segment(segment, client_id)),
                    ("PutStart", lambda: c.put_start(client_id, key, 4096)),
                    ("PutEnd", lambda: c.put_end(client_id, key)),
                    ("GetReplicaList (written key)", lambda: c.get_replica_list(key)),
                    ("Remove", lambda: c.remove(key, True)),
                    ("ExistKey (removed key)", lambda: c.exist_key(key)),
                    ("UnmountSegment", lambda: c.unmount_segment(segment_id, client_id))):
                got = answer()
                ok = got.ok and got.matches_layout is not False
                if name == "ExistKey (removed key)":
                    ok = got.ok and got.value is False
                steps.append(Step(name, ok, shown(got)))
                if not got.ok:
                    return steps, f"{name} answered {shown(got)}"
        except RpcError as exc:
            return steps, (f"{exc.method} refused our arguments: coro_rpc "
                           f"{RPC_ERRORS.get(exc.code, exc.code)} ({exc.message})")
    bad = [s for s in steps if not s.ok]
    return steps, (None if not bad else f"{bad[0].call}: {bad[0].detail}")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile
    from pathlib import Path

    from pytest_mooncake.master_rpc.standalone import StandaloneMaster
    from pytest_mooncake.releases import find_env

    parser = argparse.ArgumentParser(
        prog="python -m pytest_mooncake.master_rpc.probe",
        description="Start each installed release's mooncake_master alone on loopback and "
                    "round-trip our master RPC client against it.")
    parser.add_argument("releases", nargs="+", metavar="RELEASE",
                        help="installed releases, e.g. 0.3.10.post2 0.3.14")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="per-call deadline in seconds (default 5)")
    parser.add_argument("--no-write", action="store_true",
                        help="only ServiceReady, Ping and GetReplicaList of an absent key")
    args = parser.parse_args(argv)
    status = 0
    with tempfile.TemporaryDirectory(prefix="mc-probe-") as tmp:
        for release in args.releases:
            env = find_env(release)
            if env is None:
                print(f"{release}: not installed (python -m pytest_mooncake.releases install "
                      f"{release})")
                status = 1
                continue
            with StandaloneMaster(env, Path(tmp) / release) as master:
                result = probe(master.address, args.timeout, write=not args.no_write)
            print(f"{release}: {result.summary()}")
            status |= 0 if result.usable else 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
