"""The base image every Mooncake image starts from: a Debian bookworm made by ``debootstrap``
from the apt mirror this machine uses, with the runtime libraries the releases link (found by
``releases.envs.scan_links``: libcurl, libibverbs and its providers, librdmacm, libnuma), Python
with venv, and Debian's etcd (the etcd the docker target runs in a container of the session
network). Built once into the engine's image store as ``BASE_IMAGE``; about 30 s to bootstrap."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUITE = "bookworm"
BASE_IMAGE = f"localhost/mooncake-base:{SUITE}"
PACKAGES = ("python3", "python3-venv", "ca-certificates", "libcurl4", "libibverbs1",
            "ibverbs-providers", "librdmacm1", "libnuma1", "etcd-server", "iproute2")
"""What the rootfs includes beyond ``--variant=minbase``; changing it rebuilds the base."""
RECIPE_LABEL = "pytest-mooncake.recipe"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step failed and what it printed."""


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """``MC_DEBIAN_MIRROR``, else the first Debian archive URL in this machine's apt sources."""
    explicit = os.environ.get("MC_DEBIAN_MIRROR")
    if explicit:
        return explicit
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for match in re.finditer(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
            url = match[1]
            if "security" not in url:
                return url
    return DEFAULT_MIRROR


def recipe_id() -> str:
    return f"debootstrap-{SUITE}-minbase+" + ",".join(PACKAGES)


def ensure_base(client: Any, say: Callable[[str], None]) -> Any:
    """The base image, bootstrapped and imported first when missing or made by another recipe."""
    try:
        image = client.images.get(BASE_IMAGE)
        if (image.labels or {}).get(RECIPE_LABEL) == recipe_id():
            return image
    except Exception:  # noqa: BLE001 (not there: build it)
        pass
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (scripts/setup.sh installs it as "
                              "root: apt-get install -y debootstrap)")
    mirror = apt_mirror()
    with tempfile.TemporaryDirectory(prefix="mc-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap --variant=minbase {SUITE} from {mirror} (about 30 s)")
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
                str(rootfs), mirror]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            raise ImageBuildError(f"`{' '.join(argv)}` failed (exit {done.returncode}): "
                                  f"{(done.stdout + done.stderr).strip()[-1500:]}")
        context = Path(tmp) / "context"
        context.mkdir()
        say("packing the rootfs")
        with tarfile.open(context / "rootfs.tar", "w") as tar:
            tar.add(rootfs, arcname=".")
        shutil.rmtree(rootfs, ignore_errors=True)
        (context / "Containerfile").write_text(
            "FROM scratch\nADD rootfs.tar /\nCMD [\"/bin/bash\"]\n")
        say(f"importing it as {BASE_IMAGE}")
        return build(client, context, BASE_IMAGE, {RECIPE_LABEL: recipe_id()})


def build(client: Any, context: Path, tag: str, labels: dict[str, str]) -> Any:
    """``podman build``/``docker build`` of ``context`` (its Containerfile) through the API, on
    the host's network (pip reaches PyPI; no bridge network, no 10.88.0.0/16)."""
    try:
        image, _log = client.images.build(path=str(context), dockerfile="Containerfile", tag=tag,
                                          labels=labels, rm=True, forcerm=True,
                                          network_mode="host", timeout=1800)
    except Exception as exc:  # noqa: BLE001 (BuildError, APIError: say what the build printed)
        log = "".join(str(chunk.get("stream", "")) for chunk in getattr(exc, "build_log", []) or [])
        raise ImageBuildError(f"building {tag} failed: {exc}\n{log[-3000:]}") from None
    return image
