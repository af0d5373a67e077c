"""Mooncake releases by version: cached environments, stand-ins for missing libraries, probes.

    from pytest_mooncake.releases import ensure_env, facts_of
    env = ensure_env("mooncake-cuda13==0.3.14")      # installs once, then reused offline
    subprocess.run([env.python, "driver.py", ...], env=env.env())
    facts_of(env).master_flag("enable_oplog")         # probed from the release itself

Depends only on ``pytest_mooncake.runtime`` and libraries, never on pytest.
"""

from pytest_mooncake.releases.envs import (
    ReleaseEnv,
    ReleaseEnvError,
    ensure_env,
    find_env,
    installed_envs,
    remove_env,
)
from pytest_mooncake.releases.facts import NotProbed, ProbeFailed, ReleaseFacts, facts_of
from pytest_mooncake.releases.local_build import Build, LocalBuild
from pytest_mooncake.releases.pipinstall import ReleaseFetchError
from pytest_mooncake.releases.spec import FLAVOURS, ReleaseSpec, SpecError, parse_spec
from pytest_mooncake.releases.standins import LibraryPlan, StandInError

__all__ = ["FLAVOURS", "Build", "LibraryPlan", "LocalBuild", "NotProbed", "ProbeFailed", "ReleaseEnv", "ReleaseEnvError",
           "ReleaseFacts", "ReleaseFetchError", "ReleaseSpec", "SpecError", "StandInError",
           "ensure_env", "facts_of", "find_env", "installed_envs", "parse_spec", "remove_env"]
