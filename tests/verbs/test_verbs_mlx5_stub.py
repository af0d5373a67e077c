"""The stub libmlx5.so.1 beside the emulated libibverbs (verbs/csrc/mlx5/).

Releases from 0.3.14 on link libmlx5; the machine's needs private symbols of the real
libibverbs and fails to load under the emulated one, so the release's engine cannot even be
imported. The stub is what a process on the fabric's environment loads instead: every mlx5dv_*
symbol a release imports, at its version, answering "not supported" as rdma-core does for a
device its mlx5 provider does not drive.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from pytest_mooncake.releases import elf, installed_envs
from pytest_mooncake.verbs import library_path
from pytest_mooncake.verbs.library import MLX5_CSRC, mlx5_path

EOPNOTSUPP = 95
# Loads libmlx5.so.1 as the dynamic loader finds it, gets each kind of answer the stub gives
# (false, NULL with errno, an error number) and says which file it loaded.
PROBE = r"""
import ctypes, json, os
lib = ctypes.CDLL("libmlx5.so.1", use_errno=True)
lib.mlx5dv_devx_obj_create.restype = ctypes.c_void_p
ctypes.set_errno(0)
obj = lib.mlx5dv_devx_obj_create(None, None, 0, None, 0)
obj_errno = ctypes.get_errno()
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libmlx5" in line]
print(json.dumps({
    "supported": lib.mlx5dv_is_supported(None), "obj": obj, "obj_errno": obj_errno,
    "init_obj": lib.mlx5dv_init_obj(None, 1), "query_eqn": lib.mlx5dv_devx_query_eqn(None, 0, None),
    "loaded": sorted({os.path.realpath(p) for p in maps})}))
"""


def test_env_by_hand_gives_processes_the_stub_and_it_answers_not_supported(tmp_path):
    """``python -m pytest_mooncake.verbs env`` (the fabric's environment): libmlx5.so.1 resolves
    to the stub; the machine's libmlx5 would fail to load here (undefined
    verbs_allow_disassociate_destroy) and the probe would die at the CDLL."""
    shell = (f'set -a; eval "$({sys.executable} -m pytest_mooncake.verbs env --run-dir '
             f'{tmp_path / "rd"} --devices mlx5_0)"; set +a; exec {sys.executable} -c "$PROBE"')
    base = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120,
                          check=False, env={**base, "PROBE": PROBE})
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["loaded"] == [str(mlx5_path().resolve())], seen
    assert seen["supported"] == 0
    assert seen["obj"] is None and seen["obj_errno"] == EOPNOTSUPP
    assert seen["init_obj"] == EOPNOTSUPP and seen["query_eqn"] == EOPNOTSUPP


def test_the_stub_is_built_with_the_library_into_its_directory():
    lib = library_path()
    stub = lib.parent / "libmlx5.so.1"
    assert stub == mlx5_path() and elf.is_elf(stub.resolve())
    assert library_path() == lib and stub.resolve() == mlx5_path().resolve(), \
        "a second call built again instead of reusing the cached pair"


def test_the_stub_exports_exactly_what_its_version_script_and_source_define():
    listed = set(re.findall(r"^\s+(mlx5dv_\w+);", (MLX5_CSRC / "libmlx5.map").read_text(), re.M))
    defined = set(re.findall(r"EXPORT [^(;]*?\b(mlx5dv_\w+)\(", (MLX5_CSRC / "mlx5dv.c").read_text()))
    exported = {s.split("@")[0] for s in elf.versioned_symbols(mlx5_path().resolve(), defined=True)}
    assert listed and exported == listed == defined


LOOKUP = re.compile(rb"mlx5dv_\w+@MLX5_[\d.]+")


def _release_imports() -> dict[str, dict[str, set[str]]]:
    """``{release: {file: {"mlx5dv_x@VERSION", ...}}}`` over every installed release's ELF
    files (its mooncake package and the wheel's bundled ``*.libs``): what each imports, and
    what it looks up by version at run time (``dlvsym``, named as a string in the file)."""
    found: dict[str, dict[str, set[str]]] = {}
    for env in installed_envs():
        for root in [env.package_dir, *env.site_packages.glob("mooncake_transfer_engine*.libs")]:
            for path in elf.elf_files(root):
                wanted = {s for s in elf.versioned_symbols(path, defined=False)
                          if s.startswith("mlx5dv_")} | elf.printable_strings(path, LOOKUP)
                if wanted:
                    found.setdefault(str(env.spec), {})[path.name] = wanted
    return found


def test_the_stub_exports_every_mlx5dv_symbol_an_installed_release_imports_or_looks_up():
    imports = _release_imports()
    if not imports:
        have = ", ".join(str(e.spec) for e in installed_envs()) or "none"
        pytest.skip(f"n/a: no installed Mooncake release imports mlx5dv_* (installed: {have}); "
                    f"0.3.14 does: python -m pytest_mooncake.releases install "
                    f"mooncake-cuda13==0.3.14")
    exported = elf.versioned_symbols(mlx5_path().resolve(), defined=True)
    gaps = {f"{release} {name}": sorted(wanted - exported)
            for release, files in imports.items() for name, wanted in files.items()
            if wanted - exported}
    assert not gaps, (f"the libmlx5 stub lacks symbols releases import; add them to "
                      f"{MLX5_CSRC / 'mlx5dv.c'} and {MLX5_CSRC / 'libmlx5.map'}: {gaps}")
