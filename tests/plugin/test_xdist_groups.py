"""tests/conftest.py's hook: under ``--dist loadgroup`` a module marked ``xdist_group`` runs on
one worker, so its module fixture is built once. Without the hook (pytest 9 + xdist 3.8) the
group is lost and both workers build it: the control run shows the test can fail."""

from __future__ import annotations

from pathlib import Path

import pytest

HOOK = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()

GROUPED = """
import os, uuid
import pytest

pytestmark = pytest.mark.xdist_group("costly")

@pytest.fixture(scope="module")
def costly():
    # one file per build of the fixture, named by the worker that built it
    path = os.path.join(os.environ["BUILDS"], os.environ.get("PYTEST_XDIST_WORKER", "main")
                        + "-" + uuid.uuid4().hex)
    open(path, "w").close()

@pytest.mark.parametrize("i", range(8))
def test_uses_it(costly, i):
    pass
"""


def builds(pytester: pytest.Pytester, monkeypatch, with_hook: bool) -> list[str]:
    where = pytester.mkdir("builds")
    monkeypatch.setenv("BUILDS", str(where))
    if with_hook:
        pytester.makeconftest(HOOK)
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup",
                                           "-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=8)
    return sorted(p.name.split("-")[0] for p in where.iterdir())


def test_a_grouped_module_fixture_is_built_on_one_worker(pytester, monkeypatch):
    built = builds(pytester, monkeypatch, with_hook=True)
    assert len(built) == 1, f"the grouped module's fixture was built {len(built)} times: {built}"


def test_without_the_hook_the_group_is_lost_under_pytest_9(pytester, monkeypatch):
    if int(pytest.__version__.split(".")[0]) < 9:
        pytest.skip(f"pytest {pytest.__version__}: xdist's own group tag reaches the node id")
    built = builds(pytester, monkeypatch, with_hook=False)
    assert len(built) == 2, (f"without tests/conftest.py's hook the fixture was built "
                             f"{len(built)} time(s) ({built}): xdist may have fixed the group "
                             f"tag itself, and the hook can go")
