"""The fork server's own process: imports the modules it is told to, then forks a child per
request, each running one ``python -m MODULE ARGS...`` as a fresh interpreter would, without
the interpreter start and the imports (fork_server.py says why and when).

    python -m pytest_mooncake.runtime.fork_server_main FD MODULE [MODULE...]

FD is this process's end of a socket pair; requests and replies are JSON lines:

- ``{"op": "spawn", "module": M, "argv0": A, "args": [...], "env": {...}, "cwd": C|null,
  "log": PATH}`` -> ``{"pid": N}`` or ``{"error": ...}``. The child starts its own session,
  asks for SIGKILL when this process dies, appends its output to PATH, and runs M as
  ``__main__`` with ``sys.argv = [M's file, *args]``, ``os.environ = env``, in C.
- ``{"op": "status", "pid": N}`` -> ``{"exited": false}`` or ``{"exited": true, "status": S}``
  without reaping (a zombie keeps its pid and so its process group's id): S is the exit code,
  or minus the signal that ended it.
- ``{"op": "reap", "pid": N}`` -> ``{"status": S}`` (waits for the exit).

It answers ``{"ready": true, "threads": T}`` once the modules are imported; with more than one
thread it refuses to fork (``{"error": ...}`` to every spawn): a lock another thread held at the
fork would stay held in the child for ever.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import threading
from typing import Any

PARENT_GONE = 70


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _status(info: os.waitid_result) -> int:
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -info.si_status
    return info.si_status


def _answer(out: Any, doc: dict[str, Any]) -> None:
    out.write(json.dumps(doc) + "\n")
    out.flush()


def serve(sock: socket.socket, modules: list[str]) -> dict[str, Any]:
    """Answer requests until the client hangs up (then exit); returns only in a forked child,
    with the request it is to run."""
    for name in modules:
        importlib.import_module(name)
    me = os.getpid()
    inp = sock.makefile("r", encoding="utf-8")
    out = sock.makefile("w", encoding="utf-8")
    threads = _threads()
    _answer(out, {"ready": True, "threads": threads, "pid": me})
    for line in inp:
        req = json.loads(line)
        op, pid = req.get("op"), req.get("pid")
        try:
            if op == "spawn":
                if threads > 1:
                    raise RuntimeError(f"the fork server has {threads} threads after its "
                                       f"imports; forking it is unsafe")
                child = os.fork()
                if child == 0:
                    inp.close()
                    out.close()
                    sock.close()
                    req["_server"] = me
                    return req
                _answer(out, {"pid": child})
            elif op == "status":
                info = os.waitid(os.P_PID, int(pid), os.WEXITED | os.WNOHANG | os.WNOWAIT)
                _answer(out, {"exited": False} if info is None else
                        {"exited": True, "status": _status(info)})
            elif op == "reap":
                _, raw = os.waitpid(int(pid), 0)
                _answer(out, {"status": os.waitstatus_to_exitcode(raw)})
            else:
                raise ValueError(f"unknown op {op!r}")
        except (OSError, RuntimeError, ValueError) as exc:
            _answer(out, {"error": f"{type(exc).__name__}: {exc}"})
    raise SystemExit(0)


def become(req: dict[str, Any]) -> None:
    """In the forked child: the process ``python -m MODULE ARGS`` would have been."""
    os.setsid()
    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PDEATHSIG
        os._exit(71)
    if os.getppid() != req["_server"]:
        os._exit(PARENT_GONE)
    log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if req.get("cwd"):
        os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    sys.argv = [req["argv0"], *req["args"]]
    # as `python -m`: the module runs as __main__; its exit (SystemExit, an exception's
    # traceback and status 1, a KeyboardInterrupt) is the interpreter's ordinary exit, with
    # its threads joined and its atexit handlers run
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)


def main(argv: list[str]) -> None:
    fd, modules = int(argv[0]), argv[1:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the test process's
    sock = socket.socket(fileno=fd)
    become(serve(sock, modules))


if __name__ == "__main__":
    main(sys.argv[1:])
