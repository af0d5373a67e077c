"""Emulated RDMA devices inside containers: what a container of an emulated fabric needs.

The emulated ``libibverbs.so.1`` (``pytest_mooncake.verbs``) moves data between processes with
``process_vm_writev/readv`` by pid and names each process's control socket ``<pid>.sock``
(``MC_VERBS_CONTROL=.../%p.sock``): in its own pid namespace every container's process would be
pid 1 or 2, colliding names and pointing the copies at the wrong process. So a container whose
environment names a fabric (``MC_VERBS_RUN_DIR``) shares this host's pid namespace
(``pid_mode="host"``): its pids are the host's, the control sockets the test opens and the pids
peers copy to are right. Its fabric's run directory (device tree, ``verbs.shm``, ``ctl/``) and
the library's build cache (the library and the ``libmlx5`` stub linked beside it) are
bind-mounted at the same paths, so the environment ``EmulatedFabric.environ()`` gives works
unchanged inside.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FABRIC_VARIABLE = "MC_VERBS_RUN_DIR"


def fabric_run_options(env: Mapping[str, str], mounted: Mapping[str, Any]) -> dict[str, Any]:
    """Extra ``containers.run`` arguments for a component whose environment ``env`` names an
    emulated fabric (nothing for any other): the host's pid namespace and the bind mounts of
    the run directory and the library's directories that ``mounted`` does not hold yet."""
    run_dir = env.get(FABRIC_VARIABLE)
    if not run_dir:
        return {}
    volumes = dict(mounted)
    wanted = {run_dir: "rw"}
    for library in filter(None, env.get("LD_PRELOAD", "").split(":")):
        here = Path(library).parent
        wanted.setdefault(str(here.parent), "ro")  # the build cache: the stub is a symlink there
        wanted.setdefault(str(Path(os.path.realpath(library)).parent.parent), "ro")
    for path, mode in wanted.items():
        if not any(_under(path, held) for held in volumes):
            volumes[path] = {"bind": path, "mode": mode}
    return {"pid_mode": "host", "volumes": volumes}


def _under(path: str, directory: str) -> bool:
    return Path(path) == Path(directory) or Path(directory) in Path(path).parents


class ImageEnvironment:
    """The environment an image's processes start with, as ``LocalLauncher.install.env`` gives
    a host process's: the image's ``LD_LIBRARY_PATH`` (a release's CUDA stand-ins) kept behind
    what a fabric puts first. Only the variables a caller adds and that one are returned: a
    container starts from its image's environment, not this host's."""

    def __init__(self, image_env: Mapping[str, str]):
        self.image_env = dict(image_env)

    @classmethod
    def of(cls, image: Any) -> ImageEnvironment:
        pairs = ((getattr(image, "attrs", None) or {}).get("Config") or {}).get("Env") or []
        return cls(dict(p.split("=", 1) for p in pairs if "=" in p))

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in self.image_env.items() if k == "LD_LIBRARY_PATH"}
        env.update(extra or {})
        return env
