"""A run directory of emulated RDMA devices and the environment processes use them under.

``EmulatedFabric.create(["mlx5_0", "mlx5_1"])`` builds the library (once per content), writes
the device tree into a fresh run directory and gives, through ``environ()``, the variables under
which any process (a Mooncake binary, a Python script importing ``mooncake.engine``) loads the
emulated ``libibverbs.so.1`` instead of rdma-core's and sees those devices. Processes started
under one fabric share its QP and MR registry (``verbs.shm``) and so can RDMA to one another;
each opens a control socket in ``ctl/`` (see ``control.py``). ``close()`` removes the directory.

Variables (all also settable by hand):
  MC_VERBS_RUN_DIR   the run directory (device tree, verbs.shm, ctl/)
  MC_VERBS_CONTROL   the control socket path; ``%p`` is the pid; "off" for none
  MC_VERBS_SEED      the seed of chaos-mode draws (printed by each process at start)
  MC_VERBS_CHAOS     chaos mode from the start, e.g. ``delay_us=200,reorder=0.05,fail=0.001``
  LD_LIBRARY_PATH    the library's directory first, so ``libibverbs.so.1`` resolves to it
  LD_PRELOAD         the library, so its sysfs answers reach code that loaded libibverbs late
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pytest_mooncake.verbs.control import VerbsControl
from pytest_mooncake.verbs.devices import DeviceSpec, parse_devices, write_tree
from pytest_mooncake.verbs.library import library_path

SOCKET_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux
PID_DIGITS = 7  # pid_max is at most 4194304


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmulatedFabric:
    """Emulated devices in one run directory; ``close()`` (or ``with``) removes it."""

    def __init__(self, run_dir: Path, devices: Sequence[DeviceSpec], library: Path, seed: int,
                 chaos: str | None = None, owned: bool = True):
        self.run_dir = Path(run_dir)
        self.devices = list(devices)
        self.library = Path(library)
        self.seed = seed
        self.chaos = chaos
        self.owned = owned

    @classmethod
    def create(cls, devices: str | Iterable[str] | Sequence[DeviceSpec] = ("mlx5_0",), *,
               run_dir: str | Path | None = None, seed: int | None = None,
               chaos: str | None = None) -> EmulatedFabric:
        """Build the library and prepare a run directory (a new temporary one unless
        ``run_dir`` names an empty or missing directory)."""
        specs = (list(devices) if devices and all(isinstance(d, DeviceSpec) for d in devices)
                 else parse_devices(devices))  # type: ignore[arg-type]
        library = library_path()
        if run_dir is None:
            path = Path(tempfile.mkdtemp(prefix="mc-verbs-"))
        else:
            path = Path(run_dir).absolute()
            if path.exists() and any(path.iterdir()):
                raise FileExistsError(f"run directory {path} is not empty: give a new or empty "
                                      f"one (each run needs its own device registry)")
            path.mkdir(parents=True, exist_ok=True)
        longest = path / "ctl" / ("9" * PID_DIGITS + ".sock")
        if len(str(longest)) > SOCKET_PATH_MAX:
            shutil.rmtree(path, ignore_errors=True)
            raise ValueError(f"run directory {path} is too long for a unix socket path "
                             f"({len(str(longest))} > {SOCKET_PATH_MAX} bytes): use a shorter "
                             f"one, e.g. under /tmp")
        try:
            write_tree(path, specs)
            (path / "ctl").mkdir(mode=0o700)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 63)
        return cls(path, specs, library, seed, chaos)

    def environ(self) -> dict[str, str]:
        """Only the emulator's variables (LD_LIBRARY_PATH without what was there before)."""
        env = {
            "MC_VERBS_RUN_DIR": str(self.run_dir),
            "MC_VERBS_CONTROL": str(self.run_dir / "ctl" / "%p.sock"),
            "MC_VERBS_SEED": str(self.seed),
            "LD_LIBRARY_PATH": str(self.library.parent),
            "LD_PRELOAD": str(self.library),
        }
        if self.chaos:
            env["MC_VERBS_CHAOS"] = self.chaos
        return env

    def apply(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the emulator's variables; the
        library goes in front of an existing LD_LIBRARY_PATH / LD_PRELOAD."""
        env = dict(os.environ if base is None else base)
        for key, value in self.environ().items():
            if key in ("LD_LIBRARY_PATH", "LD_PRELOAD") and env.get(key):
                rest = [p for p in re.split(r"[:\s]+", env[key]) if p and p != value]
                value = ":".join([value, *rest])  # ld.so splits both lists at colons
            env[key] = value
        return env

    def control_socket(self, pid: int) -> Path:
        return self.run_dir / "ctl" / f"{pid}.sock"

    def control_sockets(self) -> dict[int, Path]:
        """The sockets of live processes, by pid; sockets left by dead ones are removed."""
        live = {}
        for sock in sorted((self.run_dir / "ctl").glob("*.sock")):
            try:
                pid = int(sock.stem)
            except ValueError:
                continue
            if pid_alive(pid):
                live[pid] = sock
            else:
                sock.unlink(missing_ok=True)
        return live

    def control(self, pid: int, timeout: float = 30.0) -> VerbsControl:
        """The control client of process ``pid``, once its socket exists (it appears when the
        process first uses verbs). Raises TimeoutError naming the socket after ``timeout`` s,
        or ProcessLookupError if the process is gone."""
        sock = self.control_socket(pid)
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not sock.exists():
            if not pid_alive(pid):
                raise ProcessLookupError(f"process {pid} exited before it opened an emulated "
                                         f"device (no {sock})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no control socket {sock} after {timeout:g} s: process "
                                   f"{pid} has not opened an emulated device (is it running "
                                   f"with this fabric's environment?)")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return VerbsControl(sock)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> EmulatedFabric:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
