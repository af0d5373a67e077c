"""Engine processes of a real build under valgrind memcheck (issue #25).

``MemcheckLauncher`` wraps a launcher: the processes it starts as engines run as
``valgrind --tool=memcheck ... <python> <driver> engine ...`` with ``PYTHONMALLOC=malloc``
(CPython's small-object allocator reads memory it did not allocate by design; with the system
allocator every Python object is a malloc block memcheck tracks, and those false reports go
away). Everything else it starts passes through unchanged.

What is not the engine's is left out twice:

- a suppression file (``suppressions()``) drops errors whose innermost frame is in the Python
  interpreter (``libpython3*``, the ``python3*`` executable), the emulated verbs library
  (``libibverbs.so.1`` of the plugin's cache: it copies between processes with
  process_vm_readv/writev, which memcheck sees as syscalls on foreign memory), its libmlx5
  stub, the dynamic loader (``ld-linux*``, ``libdl``), or the Go runtime of the build's etcd
  client (``libetcd_wrapper.so``: Go allocates goroutine stacks and its heap itself, so every
  access to them looks invalid to memcheck: 900 reports in the first minute of one engine);
- ``engine_errors()`` keeps, of what remains, only invalid reads, writes and frees (and
  mismatched frees) whose innermost frame outside libc, libstdc++ and valgrind's own preload
  lies in the build's own objects (its ``mooncake`` package: ``engine.so`` and the libraries
  shipped beside it).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINE_KINDS = ("InvalidRead", "InvalidWrite", "InvalidFree", "MismatchedFree")
NOT_OURS = ("libc.so", "libstdc++", "vgpreload_", "libgcc_s", "libpthread")
GO_RUNTIME = "libetcd_wrapper.so"
SUPPRESSIONS = """\
# Errors whose innermost frame is not the engine's: Python, the emulated verbs library and its
# mlx5 stub, the dynamic loader (pytest_mooncake/targets/mooncake/memcheck.py)
"""
_OBJECTS = ("*libpython3*", "*/bin/python3*", "*/libibverbs.so.1", "*/libmlx5.so.1",
            "*/ld-linux*", "*/libdl.so*", "*/libetcd_wrapper.so")
_KINDS = ("Addr1", "Addr2", "Addr4", "Addr8", "Addr16", "Addr32", "Value1", "Value2", "Value4", "Value8",
          "Value16", "Value32", "Cond", "Free", "Overlap", "Param")


def suppressions(path: Path) -> Path:
    """Write the suppression file (one entry per error kind and object) and return it."""
    entries = [SUPPRESSIONS]
    for obj in _OBJECTS:
        for kind in _KINDS:
            extra = "   ...\n" if kind == "Param" else ""
            entries.append(f"{{\n   not-the-engine-{kind}-{obj.strip('*/')}\n   Memcheck:{kind}\n"
                           + ("   *\n" if kind == "Param" else "") + f"{extra}   obj:{obj}\n}}\n")
    path.write_text("\n".join(entries))
    return path


def valgrind_argv(argv: Sequence[str], xml_dir: Path, supp: Path) -> list[str]:
    return ["valgrind", "--tool=memcheck", "--error-limit=no", "--num-callers=40",
            "--leak-check=no",  # leaks at exit are Python's and out of scope
            "--child-silent-after-fork=yes", f"--suppressions={supp}", "--xml=yes",
            f"--xml-file={xml_dir}/memcheck.%p.xml", "--read-var-info=no", *argv]


class MemcheckLauncher:
    """A launcher whose engine processes run under memcheck (other processes unchanged)."""

    def __init__(self, inner: Any, xml_dir: Path):
        self.inner = inner
        self.xml_dir = Path(xml_dir)
        self.xml_dir.mkdir(parents=True, exist_ok=True)
        self.supp = suppressions(self.xml_dir / "not-the-engine.supp")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None,
              ready: Any, ready_timeout: float, publish: Sequence[int] = ()) -> Any:
        if "engine" in argv:
            argv = valgrind_argv(argv, self.xml_dir, self.supp)
            env = {**dict(env or {}), "PYTHONMALLOC": "malloc"}
            ready_timeout = max(ready_timeout, 300.0)  # Python's start alone is ~50x slower
        return self.inner.start(name, argv, env, ready, ready_timeout, publish)


@dataclass(frozen=True)
class MemoryFinding:
    kind: str
    what: str
    stack: tuple[str, ...]
    pid: int

    def __str__(self) -> str:
        return f"{self.kind} in pid {self.pid}: {self.what}\n" + "\n".join(
            f"    {frame}" for frame in self.stack)


def _frames(error: ET.Element) -> list[tuple[str, str]]:
    out = []
    stack = error.find("stack")
    for f in (stack.findall("frame") if stack is not None else []):
        fn = f.findtext("fn") or "??"
        obj = f.findtext("obj") or ""
        where = f.findtext("file")
        line = f.findtext("line")
        text = f"{fn} ({obj}" + (f" {where}:{line}" if where else "") + ")"
        out.append((obj, text))
    return out


def _errors(xml: Path) -> tuple[int, list[ET.Element]]:
    """The pid and the complete <error> records of a report being written (memcheck writes each
    error as it finds it; the closing tags come at exit)."""
    text = xml.read_text(errors="replace")
    pid = re.search(r"<pid>(\d+)</pid>", text)
    out = []
    for block in re.findall(r"<error>.*?</error>", text, re.S):
        try:
            out.append(ET.fromstring(block))
        except ET.ParseError:
            continue
    return (int(pid.group(1)) if pid else 0), out


def engine_errors(xml_dir: Path, engine_marker: str = "/mooncake/") -> list[MemoryFinding]:
    """Invalid reads/writes/frees whose innermost frame outside libc/libstdc++/valgrind is in
    the build's objects (paths containing ``engine_marker``), in report order (readable while
    the processes still run)."""
    found = []
    for xml in sorted(Path(xml_dir).glob("memcheck.*.xml")):
        pid, errors = _errors(xml)
        for error in errors:
            kind = error.findtext("kind") or ""
            if kind not in ENGINE_KINDS:
                continue
            frames = _frames(error)
            first = next((obj for obj, _ in frames if not any(n in obj for n in NOT_OURS)), "")
            if engine_marker in first and GO_RUNTIME not in first:
                what = error.findtext("what") or error.findtext("xwhat/text") or kind
                found.append(MemoryFinding(kind, what, tuple(t for _, t in frames), pid))
    return found


def error_counts(xml_dir: Path) -> dict[str, int]:
    """Every error memcheck reported (after suppressions), by kind: the run's full picture."""
    counts: dict[str, int] = {}
    for xml in sorted(Path(xml_dir).glob("memcheck.*.xml")):
        for error in _errors(xml)[1]:
            kind = error.findtext("kind") or "?"
            counts[kind] = counts.get(kind, 0) + 1
    return counts
