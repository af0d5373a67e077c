"""The image of one Mooncake release: the Debian base, the release's wheel from PyPI in a venv
at ``/opt/mooncake``, the PyPI libraries and built stand-ins its cached environment on this host
uses (``releases.envs``: the CUDA runtime for 0.3.12, the no-device ``libcuda.so.1`` for 0.3.14),
the real ``mooncake_master`` first on PATH (the venv's script is a Python wrapper whose death
leaves the binary running). Tagged ``localhost/mooncake:VERSION`` with the recipe as a label: a
second build of the same recipe finds it and returns in seconds."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_mooncake.images.debian_rootfs import RECIPE_LABEL, build, ensure_base
from pytest_mooncake.releases import envs
from pytest_mooncake.releases.spec import ReleaseSpec
from pytest_mooncake.releases.standins import PIP_LIBRARIES

REPOSITORY = "localhost/mooncake"
PREFIX = "/opt/mooncake"
VERSION_LABEL = "org.opencontainers.image.version"
RELEASE_LABEL = "pytest-mooncake.release"


def tag_of(spec: ReleaseSpec) -> str:
    return f"{REPOSITORY}:{spec.version}"


@dataclass(frozen=True)
class Recipe:
    spec: ReleaseSpec
    containerfile: str
    standins: dict[str, Path]
    """soname -> the built stand-in on this host, copied into the image"""
    ca_bundle: Path | None = None
    """The CA certificates this host's pip trusts (a TLS-inspecting proxy's CA among them),
    used by the pip inside the build; None: the image's own ca-certificates"""

    @property
    def digest(self) -> str:
        h = hashlib.sha256(self.containerfile.encode())
        for soname, path in sorted(self.standins.items()):
            h.update(soname.encode() + path.read_bytes())
        return h.hexdigest()[:16]


def recipe(spec: ReleaseSpec, base_id: str, say: Callable[[str], None]) -> Recipe:
    env = envs.ensure_env(spec, progress=say)
    site = env.manifest["site_packages"]
    requirements = [spec.requirement] + [PIP_LIBRARIES[s].requirement for s in
                                         env.manifest.get("pip_provided", {})]
    lib_dirs = [f"{PREFIX}/{Path(rel).parent}" for rel in env.manifest.get("pip_provided", {}).values()]
    plan = env.libraries(base={})
    standins = {s.soname: s.path for s in plan.supplied if s.how == "stand-in"}
    if standins:
        lib_dirs.append(f"{PREFIX}/standins")
    quoted = " ".join(f"'{r}'" for r in requirements)
    ca = host_ca_bundle()
    lines = [
        f"# base {base_id}",
        "FROM localhost/mooncake-base:bookworm",
        *(["COPY host-ca.crt /tmp/host-ca.crt"] if ca else []),
        f"RUN python3 -m venv {PREFIX} && {PREFIX}/bin/pip install --no-cache-dir "
        f"--disable-pip-version-check {'--cert /tmp/host-ca.crt ' if ca else ''}{quoted}"
        + (" && rm /tmp/host-ca.crt" if ca else ""),
        f"RUN ln -s {PREFIX}/{site}/mooncake/mooncake_master /usr/local/bin/mooncake_master",
    ]
    if standins:
        lines.append(f"COPY standins/ {PREFIX}/standins/")
    env_line = f"ENV VIRTUAL_ENV={PREFIX} PATH=/usr/local/bin:{PREFIX}/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if lib_dirs:
        env_line += f" LD_LIBRARY_PATH={':'.join(lib_dirs)}"
    lines.append(env_line)
    return Recipe(spec, "\n".join(lines) + "\n", standins, ca)


def host_ca_bundle() -> Path | None:
    """The CA file this host's pip uses (``PIP_CERT``, ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``,
    else Debian's bundle), so pip inside a build trusts what pip here trusts."""
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    debian = Path("/etc/ssl/certs/ca-certificates.crt")
    return debian if debian.is_file() else None


def existing(client: Any, tag: str) -> Any | None:
    try:
        return client.images.get(tag)
    except Exception:  # noqa: BLE001 (not there)
        return None


def ensure_release_image(client: Any, release: str | ReleaseSpec,
                         say: Callable[[str], None]) -> tuple[Any, bool]:
    """(the image of ``release``, whether it was built now)."""
    spec = envs.as_spec(release)
    base = ensure_base(client, say)
    rec = recipe(spec, base.id, say)
    tag = tag_of(spec)
    found = existing(client, tag)
    if found is not None and (found.labels or {}).get(RECIPE_LABEL) == rec.digest:
        return found, False
    with tempfile.TemporaryDirectory(prefix="mc-image-") as tmp:
        context = Path(tmp)
        (context / "Containerfile").write_text(rec.containerfile)
        if rec.ca_bundle is not None:
            shutil.copy2(rec.ca_bundle, context / "host-ca.crt")
        if rec.standins:
            (context / "standins").mkdir()
            for soname, path in rec.standins.items():
                shutil.copy2(path, context / "standins" / soname)
        say(f"building {tag}: pip install {spec.requirement} inside the image")
        image = build(client, context, tag, {RECIPE_LABEL: rec.digest, VERSION_LABEL: spec.version,
                                             RELEASE_LABEL: str(spec)})
    return image, True
