"""``python -m pytest_mooncake.kube_manifests render|check|nemesis``.

    render FILE --image IMAGE [--ha etcd|redis] [--namespace NS] [--redis-image IMAGE]
           [-o OUT.yaml] [--no-check] [--kubernetes 1.30]
    check MANIFESTS.yaml [--kubernetes 1.30]
    nemesis

Exit status: 0 done (and valid); 1 invalid manifests (each problem printed); 2 bad usage or an
unusable cluster file; 3 no offline validator installed (kubernetes-validate).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from pytest_mooncake.kube_manifests.pod_nemesis import table
from pytest_mooncake.kube_manifests.schema_check import (
    DEFAULT_KUBERNETES,
    SchemaCheckUnavailable,
    problems,
)
from pytest_mooncake.kube_manifests.workloads import (
    DEFAULT_REDIS_IMAGE,
    HA_BACKENDS,
    ManifestInputError,
    manifests,
)
from pytest_mooncake.schemas.cluster_manifest import ManifestError, load_manifest


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_mooncake.kube_manifests",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render = sub.add_parser("render", help="manifests of a cluster file, validated offline")
    render.add_argument("cluster", metavar="FILE", help="a cluster file (or a shipped name)")
    render.add_argument("--image", required=True, help="the Mooncake image every pod runs")
    render.add_argument("--ha", choices=HA_BACKENDS, default="etcd",
                        help="the masters' HA backend (default: etcd)")
    render.add_argument("--namespace", default=None, help="metadata.namespace of every object")
    render.add_argument("--redis-image", default=DEFAULT_REDIS_IMAGE,
                        help=f"image of the Redis with --ha=redis (default: {DEFAULT_REDIS_IMAGE})")
    render.add_argument("-o", "--output", type=Path, default=None,
                        help="write here instead of standard output")
    render.add_argument("--no-check", action="store_true", help="skip the schema check")
    render.add_argument("--kubernetes", default=DEFAULT_KUBERNETES,
                        help=f"the Kubernetes version to validate against (default: "
                             f"{DEFAULT_KUBERNETES})")
    check = sub.add_parser("check", help="validate a manifests file offline")
    check.add_argument("manifests", type=Path, metavar="MANIFESTS.yaml")
    check.add_argument("--kubernetes", default=DEFAULT_KUBERNETES)
    sub.add_parser("nemesis", help="how the nemesis's faults map to pods")
    return parser


def _report(docs: list[dict], kubernetes: str) -> int:
    try:
        found = problems(docs, kubernetes)
    except SchemaCheckUnavailable as exc:
        print(f"kube_manifests: {exc}", file=sys.stderr)
        return 3
    for problem in found:
        print(f"invalid: {problem}", file=sys.stderr)
    if not found:
        print(f"kube_manifests: {len(docs)} objects valid for Kubernetes {kubernetes}",
              file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "nemesis":
        print(table())
        return 0
    if args.command == "check":
        try:
            docs = [d for d in yaml.safe_load_all(args.manifests.read_text()) if d]
        except (OSError, yaml.YAMLError) as exc:
            print(f"kube_manifests: cannot read {args.manifests}: {exc}", file=sys.stderr)
            return 2
        return _report(docs, args.kubernetes)
    try:
        docs = manifests(load_manifest(args.cluster), args.image, args.ha, args.namespace,
                         args.redis_image)
    except (ManifestError, ManifestInputError) as exc:
        print(f"kube_manifests: {exc}", file=sys.stderr)
        return 2
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0 if args.no_check else _report(docs, args.kubernetes)


if __name__ == "__main__":
    sys.exit(main())
