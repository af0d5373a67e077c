"""``python -m pytest_mooncake.releases``: install, list, locate and probe Mooncake releases."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence

from pytest_mooncake.releases import envs, record
from pytest_mooncake.releases import mooncake_family as family
from pytest_mooncake.releases.facts import facts_of
from pytest_mooncake.releases.pipinstall import ReleaseFetchError
from pytest_mooncake.releases.spec import FLAVOURS, FORMS, SpecError
from pytest_mooncake.releases.standins import StandInError

EPILOG = f"""\
A RELEASE is written as one of: {'; '.join(FORMS)}.
Without a flavour, the one PyPI publishes the version in is used, non-cuda first
(0.3.14 exists only as cuda13). Flavours: {', '.join(f'{k} ({v.distribution})' for k, v in FLAVOURS.items())}.

Environments live in $MC_CACHE_DIR/releases (default ~/.cache/pytest-mooncake/releases), one
per release, flavour and Python; once installed they are used without network access.
Libraries a release links that this machine lacks are supplied only where the loader finds no
real one: the CUDA runtime from PyPI, a no-device CUDA driver (libcuda.so.1) built with gcc.

exit status: 0 done; 1 failed (the message says why); 2 bad usage or unknown release;
3 pip could not fetch the release (the message names the pip command to run by hand)."""


def _say(msg: str) -> None:
    print(f"releases: {msg}", file=sys.stderr, flush=True)


def _python(args: argparse.Namespace) -> str:
    return args.python or sys.executable


def cmd_install(args: argparse.Namespace) -> int:
    for text in args.release:
        env = envs.ensure_env(text, python=_python(args), progress=None if args.quiet else _say)
        print(f"{env.spec}\t{env.root}\t{env.describe()}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    found = envs.installed_envs()
    rows = [{"release": str(e.spec), "version": e.version, "flavour": e.flavour,
             "python": e.manifest.get("python_version"), "path": str(e.root),
             "size_bytes": (size := e.size_bytes()), "size_mb": round(size / 2**20, 1),
             "install_seconds": e.install_seconds,
             "created": e.manifest.get("created"), "libraries": e.describe()} for e in found]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no release environments in {envs.releases_root()} "
              f"(install one: python -m pytest_mooncake.releases install 0.3.13.post1)")
        return 0
    for r in rows:
        print(f"{r['release']:<32} py{r['python']:<8} {r['size_mb']:>7.1f} MB  "
              f"installed in {r['install_seconds']:>5.1f} s  {r['path']}\n    {r['libraries']}")
    return 0


def cmd_path(args: argparse.Namespace) -> int:
    env = envs.find_env(args.release, python=_python(args))
    if env is None:
        print(f"releases: {args.release} is not installed; run `{sys.executable} -m "
              f"pytest_mooncake.releases install {args.release}`", file=sys.stderr)
        return 1
    target = {"root": env.root, "python": env.python, "master": env.master_binary,
              "bench": env.bench_binary, "package": env.package_dir}[args.what]
    print(target)
    return 0


@contextlib.contextmanager
def _etcd(args: argparse.Namespace) -> Iterator[str | None]:
    if not args.live:
        yield None
    elif args.etcd:
        yield args.etcd
    else:
        from pytest_mooncake.releases.scratch_etcd import scratch_etcd

        with scratch_etcd() as endpoint:
            yield endpoint


def cmd_probe(args: argparse.Namespace) -> int:
    env = envs.find_env(args.release, python=_python(args))
    if env is None:
        if args.no_install:
            print(f"releases: {args.release} is not installed", file=sys.stderr)
            return 1
        env = envs.ensure_env(args.release, python=_python(args), progress=_say)
    with _etcd(args) as etcd:
        facts = facts_of(env, live=args.live, etcd=etcd, refresh=args.refresh)
    summary = record.summary(facts)
    if args.record:
        path = record.write(facts)
        _say(f"recorded {path}")
    if args.json:
        print(json.dumps(summary, indent=1, sort_keys=True))
        return 0
    print(env.describe())
    print(f"  environment {env.root}")
    for key in ("master_starts", "ha_master_starts", "engine_round_trip", "snapshot_means",
                "client_ttl_flag", "standins"):
        print(f"  {key.replace('_', ' ')}: {summary.get(key, 'not probed (use --live)')}")
    current = None
    for row, present in facts.table():
        if row.kind != current:
            current = row.kind
            print(f"{row.kind} ({family.PROBES[row.kind]}):")
        mark = {True: "yes", False: "NO", None: "?"}[present]
        print(f"  {mark:<4}{row.name:<44}{row.use}")
    if not args.live:
        print("('?': live probe not run; add --live to start a master and two engines)")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    gone = envs.remove_env(args.release, python=_python(args))
    print(f"removed {gone}" if gone else f"{args.release} was not installed")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m pytest_mooncake.releases",
        description="Cached environments of Mooncake releases, with stand-ins for libraries this "
                    "machine lacks and probes of what each release has.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--python", metavar="PY",
                     help="interpreter that creates and runs the environments (default: this one)")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("install", help="install releases (reuses a complete environment)",
                       description="Install each RELEASE into its cached environment (python -m "
                       "venv, pip install mooncake-transfer-engine-FLAVOUR==VERSION and the CUDA "
                       "runtime it links). A complete environment is reused without network; "
                       "concurrent installs of one release wait for each other.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("release", nargs="+", metavar="RELEASE",
                   help="a release version, e.g. 0.3.13 0.3.14")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(run=cmd_install)

    p = sub.add_parser("list", help="installed environments: size, install time, libraries",
                       description="List complete environments in the cache with their size, how "
                       "long they took to install and how their CUDA libraries are found here.")
    p.add_argument("--json", action="store_true", help="one JSON array instead of text")
    p.set_defaults(run=cmd_list)

    p = sub.add_parser("path", help="print where an installed release is",
                       description="Print a path of an installed RELEASE (exit 1 when it is not "
                       "installed; never installs or touches the network).")
    p.add_argument("release", metavar="RELEASE", help="a release version, e.g. 0.3.13")
    p.add_argument("--what", choices=("root", "python", "master", "bench", "package"),
                   default="root", help="which path: the environment (default), its python, the "
                   "real mooncake_master / transfer_engine_bench, or site-packages/mooncake")
    p.set_defaults(run=cmd_path)

    p = sub.add_parser("probe", help="what a release has: flags, metrics, endpoints, fields",
                       description="Probe RELEASE for every row of the Mooncake family table "
                       "(pytest_mooncake/releases/mooncake_family.py): its mooncake_master --help, "
                       "Python API and ELF strings; with --live also a started master (alone and "
                       "in HA mode), its /metrics, admin endpoints and log, and a write/read round "
                       "trip between two TransferEngines with etcd metadata. Installs the release "
                       "first unless --no-install.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("release", metavar="RELEASE", help="a release version, e.g. 0.3.13")
    p.add_argument("--live", action="store_true",
                   help="also start a master, an HA master and two engines (needs etcd)")
    p.add_argument("--etcd", metavar="HOST:PORT",
                   help="etcd for --live (default: start a scratch etcd on loopback)")
    p.add_argument("--refresh", action="store_true", help="probe again instead of the cache")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--record", action="store_true",
                   help=f"write the probed facts to {record.RECORD_DIR}/ (the package's record)")
    p.add_argument("--no-install", action="store_true", help="fail instead of installing")
    p.set_defaults(run=cmd_probe)

    p = sub.add_parser("remove", help="delete an installed environment",
                       description="Delete the environment of RELEASE (waits for an install of it "
                       "in progress).")
    p.add_argument("release", metavar="RELEASE", help="a release version, e.g. 0.3.13")
    p.set_defaults(run=cmd_remove)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except SpecError as exc:
        print(f"releases: {exc}", file=sys.stderr)
        return 2
    except ReleaseFetchError as exc:
        print(f"releases: {exc}", file=sys.stderr)
        return 3
    except (envs.ReleaseEnvError, StandInError, OSError, RuntimeError) as exc:
        print(f"releases: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
