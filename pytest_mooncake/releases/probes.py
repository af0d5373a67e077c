"""Ask a release what it has: each probe runs the release itself and returns plain JSON data.

Static probes need nothing but the environment (``--help``, the Python module, the ELF files);
live probes start a ``mooncake_master`` (alone, and in HA mode on a given etcd) and two
TransferEngines (a write/read round trip over TCP with etcd metadata, and the descriptor the
target publishes). ``facts.ReleaseFacts`` caches their results per environment.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_mooncake.releases import elf
from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.releases.gflags_help import parse_help
from pytest_mooncake.releases.local_build import Build
from pytest_mooncake.releases.procs import log_tail, running, stop, wait_until
from pytest_mooncake.releases.scratch_etcd import etcd_get
from pytest_mooncake.runtime.loopback_http import http_get
from pytest_mooncake.runtime.ports import free_port, release_port

PEER_SCRIPT = Path(__file__).with_name("peer_script.py")
START_TIMEOUT = 60.0
"""Seconds a master or engine gets to come up (a loaded 2-core machine is slow, not broken)."""


# ------------------------------------------------------------------------------ static probes


def master_help(env: Build) -> dict[str, Any]:
    """``{"flags": {name: {type, default, description, source}}}`` or ``{"error": ...}``."""
    binary = env.master_binary
    if binary is None:
        return {"error": f"{env.distribution} {env.version} ships no mooncake_master"}
    try:
        out = subprocess.run([str(binary), "--help"], env=env.env(), capture_output=True,
                             text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{binary} --help failed: {exc}"}
    try:
        flags = parse_help(out.stdout)
    except ValueError as exc:
        return {"error": f"{binary} --help (exit {out.returncode}): {exc}; stderr: "
                         f"{out.stderr.strip()[-300:]}"}
    return {"flags": {name: flag.as_dict() for name, flag in sorted(flags.items())}}


def python_api(env: Build) -> dict[str, Any]:
    """The release's Python surface (``peer_script.py attrs`` run by the environment's python)."""
    try:
        out = subprocess.run([str(env.python), str(PEER_SCRIPT), "attrs"], env=env.env(),
                             capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"probing the Python API failed: {exc}"}
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"importing mooncake with {env.python} failed (exit {out.returncode}): "
                         f"{' | '.join(out.stderr.strip().splitlines()[-3:])}"}


def env_vars(env: Build) -> list[str]:
    """``MC_*`` names stored in the release's ELF files (the variables it can read)."""
    names: set[str] = set()
    for path in elf.elf_files(env.package_dir):
        names |= elf.printable_strings(path, family.ENV_NAME)
    return sorted(names)


def static(env: Build) -> dict[str, Any]:
    return {"master_help": master_help(env), "python_api": python_api(env),
            "env_vars": env_vars(env), "libraries": env.libraries().describe(),
            "standins": env.standins}


# ------------------------------------------------------------------------------ master argv


class MissingFlag(LookupError):
    """A setting the caller requires has no flag in this release."""


def master_argv(binary: Path, flags: Mapping[str, Any], settings: Mapping[str, Any],
                required: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """``mooncake_master`` argv for ``settings`` (``{setting: value}``) as this release spells
    them: ``rpc_port`` falls back to ``--port``, ``client_ttl`` uses the first of
    ``CLIENT_TTL_FLAGS`` it has; a setting with no flag is left out and reported in the second
    value (``{setting: reason}``), or raises ``MissingFlag`` when in ``required``."""
    argv, dropped = [str(binary)], {}
    aliases = {"rpc_port": ("rpc_port", "port"), "client_ttl": family.CLIENT_TTL_FLAGS}
    for setting, value in settings.items():
        if value is None:
            continue
        spelled = next((f for f in aliases.get(setting, (setting,)) if f in flags), None)
        if spelled is None:
            why = f"no --{' or --'.join(aliases.get(setting, (setting,)))} (mooncake_master --help)"
            if setting in required:
                raise MissingFlag(f"{setting}: {why}")
            dropped[setting] = why
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        argv.append(f"--{spelled}={text}")
    return argv, dropped


# ------------------------------------------------------------------------------ live probes


def metric_names(text: str) -> list[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return sorted(names)


def parse_config_echo(text: str) -> dict[str, str]:
    """``a=1, b=x, rpc protocol=tcp`` -> ``{"a": "1", ...}``."""
    out = {}
    for part in text.split(", "):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


@contextmanager
def _workdir(base: Path | None, label: str) -> Iterator[Path]:
    if base is not None:
        path = base / f"{label}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=f"mc-release-{label}-") as tmp:
        yield Path(tmp)


def master(env: Build, flags: Mapping[str, Any], *, etcd: str | None = None,
           workdir: Path | None = None, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Start a master (HA on ``etcd`` when given), wait for its admin port, read ``/metrics``,
    try every admin endpoint of the family table, match its log lines, stop it (SIGTERM).
    ``{"started": bool, "argv", "dropped", "metrics", "admin", "log", "exit", "error"}``."""
    if env.master_binary is None:
        return {"started": False, "error": "no mooncake_master in this release"}
    rpc, admin = free_port(), free_port()
    try:
        return _master(env, flags, rpc, admin, etcd=etcd, workdir=workdir, timeout=timeout)
    finally:
        release_port(rpc)
        release_port(admin)


def _master(env: Build, flags: Mapping[str, Any], rpc: int, admin: int, *, etcd: str | None,
            workdir: Path | None, timeout: float) -> dict[str, Any]:
    settings: dict[str, Any] = {"rpc_port": rpc, "rpc_address": "127.0.0.1", "metrics_port": admin,
                                "metrics_host": "127.0.0.1"}
    if etcd:
        settings.update(enable_ha=True, etcd_endpoints=etcd,
                        cluster_id=f"probe-{uuid.uuid4().hex[:8]}")
    argv, dropped = master_argv(env.master_binary, flags, settings)
    result: dict[str, Any] = {"started": False, "argv": argv[1:], "dropped": dropped}
    base = f"http://127.0.0.1:{admin}"
    with _workdir(workdir, "master-ha" if etcd else "master") as wd:
        log = wd / "master.log"
        began = time.monotonic()
        with running(argv, env.env(), log) as proc:
            try:
                wait_until(lambda: http_get(base + "/metrics", 1.0)[0] == 200, timeout,
                           f"GET {base}/metrics of {env.version}", proc, log)
            except (TimeoutError, RuntimeError) as exc:
                result["error"] = str(exc)
                result["exit"] = proc.poll()
                return result
            result["started"] = True
            result["start_seconds"] = round(time.monotonic() - began, 2)
            if etcd:
                result["health"] = _leader_health(base, timeout)
            status, body = http_get(base + "/metrics")
            result["metrics"] = metric_names(body) if status == 200 else []
            result["admin"] = {row.name: http_get(base + row.name)[0]
                               for row in family.ADMIN_ENDPOINTS}
            result["exit"] = stop(proc)
        text = log.read_text(errors="replace")
    result["log"] = {name: m["value"] for name, pat in family.LOG_PATTERNS.items()
                     if (m := pat.search(text))}
    if "config_echo" in result["log"]:
        result["config_echo_keys"] = sorted(parse_config_echo(result["log"]["config_echo"]))
    return result


def _leader_health(base: str, timeout: float) -> dict[str, Any]:
    """``/health`` once the master is a serving leader (HA: it won the election and finished
    its warm-up; a release whose /health has no ``service_ready`` counts as ready)."""
    def leader() -> dict[str, Any] | None:
        status, body = http_get(base + "/health", 1.0)
        try:
            doc = json.loads(body) if status == 200 else None
        except ValueError:
            return None
        if isinstance(doc, dict) and doc.get("role") == "leader" and doc.get("service_ready", True):
            return doc
        return None

    try:
        return wait_until(leader, timeout, f"GET {base}/health role=leader, service_ready")
    except TimeoutError as exc:
        status, body = http_get(base + "/health", 1.0)
        return {"error": str(exc), "last": [status, body[:300]]}


def _read_json_line(proc: subprocess.Popen, deadline: float, what: str, log: Path) -> dict:
    """One JSON line from ``proc.stdout`` before ``deadline`` (non-JSON lines are skipped)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what}: no answer within the deadline{log_tail(log)}")
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if not ready:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: exited with {proc.returncode}{log_tail(log)}")
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            proc.wait(5)
            raise RuntimeError(f"{what}: exited with {proc.returncode}{log_tail(log)}")
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                if "error" in doc:
                    raise RuntimeError(f"{what}: {doc['error']}{log_tail(log)}")
                return doc


def engines(env: Build, etcd: str, *, workdir: Path | None = None, size: int = 1 << 16,
            seed: int = 0, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Two TransferEngines of this release over TCP with metadata in ``etcd``: the target
    publishes a buffer (its descriptor is read from etcd), the initiator writes ``size`` seeded
    bytes into it and reads them back; the target's own digest of its buffer must match.
    ``{"round_trip": bool, "descriptor": {...}, "initiator": {...}, "error": ...}``."""
    tag = uuid.uuid4().hex[:8]
    target_seg, initiator_seg = f"probe-t-{tag}", f"probe-i-{tag}"
    metadata = f"etcd://{etcd}"
    out: dict[str, Any] = {"round_trip": False, "metadata": metadata}
    penv = env.env()
    penv.pop("MC_METADATA_CLUSTER_ID", None)  # the descriptor is read at mooncake/ram/<segment>
    with _workdir(workdir, "engines") as wd:
        tlog = wd / "target.log"
        argv = [str(env.python), str(PEER_SCRIPT), "target", "--segment", target_seg,
                "--metadata", metadata, "--size", str(size)]
        with running(argv, penv, tlog, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as tp:
            try:
                ready = _read_json_line(tp, time.monotonic() + timeout,
                                        f"engine {target_seg} of {env.version}", tlog)
                raw = etcd_get(etcd, f"mooncake/ram/{target_seg}")
                out["descriptor"] = json.loads(raw) if raw else None
                out["descriptor_fields"] = sorted(out["descriptor"]) if raw else []
                ilog = wd / "initiator.log"
                iargv = [str(env.python), str(PEER_SCRIPT), "initiator", "--segment",
                         initiator_seg, "--metadata", metadata, "--target", target_seg,
                         "--size", str(size), "--seed", str(seed)]
                with running(iargv, penv, ilog, stdout=subprocess.PIPE) as ip:
                    result = _read_json_line(ip, time.monotonic() + timeout,
                                             f"initiator {initiator_seg} of {env.version}", ilog)
                out["initiator"] = result
                assert tp.stdin is not None
                tp.stdin.write(b"digest\n")
                tp.stdin.flush()
                digest = _read_json_line(tp, time.monotonic() + timeout, "target digest", tlog)
                out["target_sha256"] = digest.get("sha256")
                out["round_trip"] = (result.get("write_rc") == 0 and result.get("read_rc") == 0
                                     and bool(result.get("equal"))
                                     and digest.get("sha256") == result.get("sha256"))
                out["buffer"] = ready.get("buffer")
                tp.stdin.write(b"quit\n")
                tp.stdin.flush()
            except (TimeoutError, RuntimeError, OSError, ValueError) as exc:
                out["error"] = str(exc)
    return out
