"""``python -m pytest_mooncake.images``: build, list and remove images of Mooncake releases.

    build RELEASE|IMAGE ...   localhost/mooncake:VERSION from the Debian base + the release's
                              wheel (cached: a second build of the same recipe takes seconds);
                              an image reference instead (kvcacheai/mooncake:0.3.13) is checked
                              to be present in the engine, to judge with docker:IMAGE
    list [--json]             the images of releases in the engine
    remove RELEASE ...        remove localhost/mooncake:VERSION

The engine is the one the docker target uses (containers.session_engine: DOCKER_HOST, a Docker
on /var/run/docker.sock, or Podman started with its storage in MC_PODMAN_DIR).
exit status: 0 done; 1 failed (the message says why); 2 bad usage; 4 no container engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from pytest_mooncake.container_engine.session_engine import ContainerEngine, EngineUnavailable
from pytest_mooncake.images.debian_rootfs import BASE_IMAGE, ImageBuildError
from pytest_mooncake.images.release_image import (
    RELEASE_LABEL,
    REPOSITORY,
    VERSION_LABEL,
    ensure_release_image,
    existing,
    tag_of,
)
from pytest_mooncake.releases import envs
from pytest_mooncake.releases.spec import SpecError


def _say(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def is_image_reference(text: str) -> bool:
    """An operator's image (has a repository part) rather than a release version."""
    return "/" in text or (":" in text and not text[0].isdigit())


def cmd_build(engine: ContainerEngine, args: argparse.Namespace) -> int:
    for text in args.what:
        began = time.monotonic()
        if is_image_reference(text):
            image = existing(engine.client, text)
            if image is None:
                _say(f"{text} is not in the engine ({engine.how}) and no registry is reachable "
                     f"here: load it first (podman load -i FILE, with CONTAINERS_CONF and "
                     f"CONTAINERS_STORAGE_CONF of MC_PODMAN_DIR)")
                return 1
            print(f"{text}\t{image.short_id}\tpresent (an operator's image, judged as is)")
            continue
        image, built = ensure_release_image(engine.client, text, _say)
        print(f"{image.tags[0] if image.tags else image.short_id}\t{image.short_id}\t"
              f"{'built' if built else 'cached'} in {time.monotonic() - began:.1f} s")
    return 0


def _rows(engine: ContainerEngine) -> list[dict[str, object]]:
    rows = []
    for image in engine.client.images.list():
        tags = [t for t in image.tags if t.startswith((REPOSITORY + ":", BASE_IMAGE))]
        if tags:
            labels = image.labels or {}
            rows.append({"tag": tags[0], "id": image.short_id,
                         "release": labels.get(RELEASE_LABEL), "version": labels.get(VERSION_LABEL),
                         "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
                         "created": image.attrs.get("Created")})
    return rows


def cmd_list(engine: ContainerEngine, args: argparse.Namespace) -> int:
    rows = _rows(engine)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    elif not rows:
        print(f"no Mooncake images in the engine ({engine.how}); build one: "
              f"python -m pytest_mooncake.images build 0.3.13.post1")
    else:
        for r in rows:
            print(f"{r['tag']}\t{r['id']}\t{r['release'] or 'base'}\t{r['size_mb']} MB")
    return 0


def cmd_remove(engine: ContainerEngine, args: argparse.Namespace) -> int:
    for text in args.what:
        tag = text if is_image_reference(text) else tag_of(envs.as_spec(text))
        if existing(engine.client, tag) is None:
            _say(f"{tag}: not present")
            continue
        engine.client.images.remove(tag, force=True)
        print(f"removed {tag}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_mooncake.images",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build (or find) release images")
    p.add_argument("what", nargs="+", metavar="RELEASE|IMAGE")
    p = sub.add_parser("list", help="the release images in the engine")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("remove", help="remove release images")
    p.add_argument("what", nargs="+", metavar="RELEASE|IMAGE")
    args = parser.parse_args(argv)
    try:
        engine = ContainerEngine().start()
    except EngineUnavailable as exc:
        _say(str(exc))
        return 4
    try:
        return {"build": cmd_build, "list": cmd_list, "remove": cmd_remove}[args.command](engine, args)
    except SpecError as exc:
        _say(str(exc))
        return 2
    except ImageBuildError as exc:
        _say(str(exc))
        return 1
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main())
