"""``python -m pytest_mooncake.verbs``: emulated RDMA devices by hand.

    env    prepare a run directory and print the environment to run processes on it
    ctl    send one control request to a running process (hold, release, counters, ...)
    list   the processes of a run directory that have a control socket
    clean  remove a run directory once no process uses it
    build  build the emulated library (and the libmlx5 stub beside it) and print its path
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

from pytest_mooncake.verbs.control import VerbsControl, VerbsControlError
from pytest_mooncake.verbs.devices import OPTION_HELP, DeviceSpecError
from pytest_mooncake.verbs.fabric import EmulatedFabric, pid_alive
from pytest_mooncake.verbs.library import VerbsBuildError, library_path

EPILOG = f"""\
examples:
  # two emulated NICs; the variables go to every command started from this shell
  set -a; eval "$(python -m pytest_mooncake.verbs env --devices mlx5_0,mlx5_1)"; set +a

  # or for one command (Mooncake's RDMA bench as the target side)
  python -m pytest_mooncake.verbs env --devices mlx5_0 --run-dir /tmp/mcv > /tmp/mcv.env
  (set -a; . /tmp/mcv.env; MC_TCP_BIND_ADDRESS=127.0.0.1 exec \\
      .../site-packages/mooncake/transfer_engine_bench --mode=target --protocol=rdma \\
      --device_name=mlx5_0 --metadata_server=etcd://127.0.0.1:2379 \\
      --local_server_name=127.0.0.1:12345)

  python -m pytest_mooncake.verbs list /tmp/mcv              # pids and sockets
  python -m pytest_mooncake.verbs ctl /tmp/mcv/ctl/4242.sock counters
  python -m pytest_mooncake.verbs ctl /tmp/mcv/ctl/4242.sock hold opcode=write nth=3
  python -m pytest_mooncake.verbs ctl /tmp/mcv/ctl/4242.sock held
  python -m pytest_mooncake.verbs ctl /tmp/mcv/ctl/4242.sock release ids=2,1 status=retry_exc_err
  python -m pytest_mooncake.verbs ctl /tmp/mcv/ctl/4242.sock port dev=mlx5_0 state=down
  python -m pytest_mooncake.verbs clean /tmp/mcv

device options (after the name, colon-separated): {OPTION_HELP}
"""

CTL_HELP = """\
requests (key=value arguments; a reply is `ok ...`, data lines, then `end`):
  hello                                  pid, seed, chaos state, devices
  hold [stage=completion|execution] [dev=NAME] [qp=QPN] [peer=PID] [opcode=write|read]
       [wr_id=N] [nth=N] [count=N]       hold the nth matching WR (count: how many; 0 = all);
                                         peer: the process at the other end of the QP
  unhold rule=ID|all                     remove hold rules (held entries stay held)
  rules / held                           list hold rules / held completions
  release [ids=3,1,2|all] [status=NAME] [keep_qp=1]
                                         release in that order; an error status sets the QP to
                                         ERR unless keep_qp=1 (statuses: ibv_wc_status names
                                         without IBV_WC_, e.g. retry_exc_err, rem_access_err)
  qp_error qp=QPN [event=qp_fatal|qp_req_err|qp_access_err|none]
                                         QP to ERR (its unexecuted WRs flush) + async event
  event type=NAME [dev=NAME] [port=N] [qp=QPN] [cq=ID] [gid=G index=I]
                                         raise an async event (qp_fatal, device_fatal,
                                         gid_change, port_err, cq_err, lid_change, ...)
  port dev=NAME [port=N] state=down|up   port state, host-wide, with PORT_ERR/PORT_ACTIVE
  counters                               per QP, per CQ and total counters
  chaos seed=N [delay_us=N] [reorder=P] [fail=P] [fail_status=NAME] | chaos off
  wait what=held|posted|completed|cqes|polled min=N [timeout_ms=T]
"""


def cmd_env(args: argparse.Namespace) -> int:
    fabric = EmulatedFabric.create(args.devices, run_dir=args.run_dir, seed=args.seed,
                                   chaos=args.chaos)
    env = fabric.environ() if args.only_ours else {
        k: v for k, v in fabric.apply().items() if k in fabric.environ()}
    if args.format == "json":
        print(json.dumps(env, indent=2))
        return 0
    prefix = "export " if args.format == "export" else ""
    print(f"emulated RDMA devices {', '.join(d.name for d in fabric.devices)} in "
          f"{fabric.run_dir} (seed {fabric.seed}); remove it with: "
          f"python -m pytest_mooncake.verbs clean {fabric.run_dir}", file=sys.stderr)
    for key, value in env.items():
        print(f"{prefix}{key}={shlex.quote(value)}")
    return 0


def cmd_ctl(args: argparse.Namespace) -> int:
    line = " ".join(args.request)
    if not line:
        print(CTL_HELP, end="")
        return 2
    ctl = VerbsControl(args.socket, timeout=args.timeout)
    try:
        reply = ctl.request(line, timeout=args.timeout)
    except VerbsControlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        ctl.close()
    print("\n".join(reply.raw))
    return 0


def _run_dir(path: str) -> Path:
    run_dir = Path(path)
    if not (run_dir / "ctl").is_dir() or not (run_dir / "sys").is_dir():
        raise SystemExit(f"error: {run_dir} is not a run directory of emulated devices "
                         f"(no ctl/ and sys/ in it)")
    return run_dir


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(shlex.quote(a.decode(errors="replace")) for a in raw.split(b"\0") if a)


def _live_sockets(run_dir: Path) -> dict[int, Path]:
    fabric = EmulatedFabric(run_dir, [], Path("."), 0, owned=False)
    return fabric.control_sockets()


def cmd_list(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    for pid, sock in _live_sockets(run_dir).items():
        print(f"{pid}\t{sock}\t{_cmdline(pid)[:200]}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args.run_dir)
    live = [pid for pid in _live_sockets(run_dir) if pid_alive(pid)]
    if live and not args.force:
        print(f"error: processes {', '.join(map(str, live))} still use {run_dir}; stop them "
              f"first or pass --force", file=sys.stderr)
        return 1
    shutil.rmtree(run_dir)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    print(library_path())
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pytest_mooncake.verbs", description=__doc__.split("\n\n")[0],
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    env = sub.add_parser("env", help="prepare a run directory and print its environment",
                         description="Build the emulated libibverbs.so.1 if needed, write the "
                         "device tree into a run directory, and print the variables (KEY=VALUE, "
                         "shell-quoted) under which a process uses those devices.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    env.add_argument("--devices", default="mlx5_0",
                     help="comma-separated device names, each optionally followed by "
                          f"options: NAME[:key=value...] ({OPTION_HELP}); default mlx5_0")
    env.add_argument("--run-dir", help="an empty or new directory (default: a new one in $TMPDIR)")
    env.add_argument("--seed", type=int, help="seed of chaos-mode draws (default: random, printed)")
    env.add_argument("--chaos", help="chaos mode from the start, e.g. delay_us=200,reorder=0.05")
    env.add_argument("--format", choices=("shell", "export", "json"), default="shell",
                     help="KEY=VALUE lines (default), `export KEY=VALUE` lines, or JSON")
    env.add_argument("--only-ours", action="store_true",
                     help="LD_LIBRARY_PATH/LD_PRELOAD without what this shell already had")
    env.set_defaults(func=cmd_env)

    ctl = sub.add_parser("ctl", help="send a control request to a running process",
                         description="Send one request to the control socket of a process "
                         "running on emulated devices and print the reply.",
                         epilog=CTL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    ctl.add_argument("socket", help="the process's control socket (RUN_DIR/ctl/PID.sock)")
    ctl.add_argument("request", nargs=argparse.REMAINDER, help="command and key=value arguments")
    ctl.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the reply")
    ctl.set_defaults(func=cmd_ctl)

    ls = sub.add_parser("list", help="processes with a control socket in a run directory")
    ls.add_argument("run_dir", help="a run directory 'env' prepared")
    ls.set_defaults(func=cmd_list)

    clean = sub.add_parser("clean", help="remove a run directory no process uses any more")
    clean.add_argument("run_dir", help="a run directory 'env' prepared")
    clean.add_argument("--force", action="store_true", help="remove it even if processes use it")
    clean.set_defaults(func=cmd_clean)

    build = sub.add_parser("build", help="build the emulated library (and the libmlx5 stub beside "
                           "it) and print its path")
    build.set_defaults(func=cmd_build)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (DeviceSpecError, VerbsBuildError, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
