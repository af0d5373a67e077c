"""Release strings name one exact version of one flavour, or say what is accepted."""

from __future__ import annotations

import pytest

from pytest_mooncake.releases.catalog import resolve
from pytest_mooncake.releases.spec import ReleaseSpec, SpecError, parse_spec


@pytest.mark.parametrize(("text", "version", "flavour"), [
    ("0.3.12.post1", "0.3.12.post1", None),
    (" 0.3.13.post1 ", "0.3.13.post1", None),
    ("mooncake==0.3.12.post1", "0.3.12.post1", None),
    ("mooncake-cuda13==0.3.14", "0.3.14", "cuda13"),
    ("mooncake-non-cuda==0.3.10.post2", "0.3.10.post2", "non-cuda"),
    ("mooncake-transfer-engine-cuda13==0.3.14", "0.3.14", "cuda13"),
    ("mooncake_transfer_engine_non_cuda == 0.3.11.post1", "0.3.11.post1", "non-cuda"),
    ("mooncake-transfer-engine==0.3.13", "0.3.13", None),
])
def test_accepted_forms(text, version, flavour):
    assert parse_spec(text) == ReleaseSpec(version, flavour)


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty Mooncake release"),
    ("mooncake>=0.3.13", "one exact version: use =="),
    ("mooncake~=0.3", "one exact version"),
    ("mooncake-cuda12==0.3.14", "'mooncake-cuda12' is not a Mooncake release name"),
    ("vllm==0.3.14", "is not a Mooncake release name"),
    ("mooncake==latest", "'latest' is not a version"),
    ("0.3.12-post1", "write the version as PyPI does, '0.3.12.post1'"),
    ("reference:legacy", "names no Mooncake release"),
])
def test_rejected_forms_say_what_is_accepted(text, says):
    with pytest.raises(SpecError) as err:
        parse_spec(text)
    assert says in str(err.value)
    if "exact" not in says and "PyPI" not in says and "not a version" not in says:
        assert "mooncake-FLAVOUR==VERSION" in str(err.value)


def test_unknown_flavour_in_a_spec_object():
    with pytest.raises(SpecError, match="known are non-cuda, cuda13"):
        ReleaseSpec("0.3.14", "cuda12")


def test_requirement_key_and_text():
    spec = ReleaseSpec("0.3.14", "cuda13")
    assert spec.requirement == "mooncake-transfer-engine-cuda13==0.3.14"
    assert spec.key == "cuda13-0.3.14"
    assert str(spec) == "mooncake-cuda13==0.3.14"
    with pytest.raises(SpecError, match="no flavour chosen"):
        _ = ReleaseSpec("0.3.14").requirement


def test_default_flavour_is_what_pypi_publishes_non_cuda_first():
    assert resolve(parse_spec("0.3.14"), ask_pip=False).flavour == "cuda13"
    assert resolve(parse_spec("0.3.13.post1"), ask_pip=False).flavour == "non-cuda"
    assert resolve(parse_spec("0.3.9"), ask_pip=False).flavour == "non-cuda"


def test_a_named_flavour_wins_and_an_installed_one_comes_before_pypi():
    assert resolve(parse_spec("mooncake-cuda13==0.3.13.post1"), ask_pip=False).flavour == "cuda13"
    assert resolve(parse_spec("0.3.13.post1"), ["cuda13"], ask_pip=False).flavour == "cuda13"
    assert resolve(parse_spec("0.3.13.post1"), ["cuda13", "non-cuda"],
                   ask_pip=False).flavour == "non-cuda"


def test_a_version_nobody_publishes_keeps_the_first_preference_so_pip_names_it():
    assert resolve(parse_spec("0.0.999"), ask_pip=False).flavour == "non-cuda"


def test_release_test_selection_and_offline_policy():
    from release_choice import CI_RELEASES, selected_releases, skip_or_fail_unreachable

    from pytest_mooncake.releases import ReleaseFetchError

    assert selected_releases({}) == CI_RELEASES == ("0.3.13.post1", "0.3.14")
    assert len(selected_releases({"MC_TEST_RELEASES": "all"})) == 5
    assert selected_releases({"MC_TEST_RELEASES": "0.3.12.post1, 0.3.14"}) == ("0.3.12.post1", "0.3.14")
    exc = ReleaseFetchError("cannot install", "pip install x", "ERROR: No matching distribution", True)
    with pytest.raises(pytest.skip.Exception, match="pip cannot reach PyPI"):
        skip_or_fail_unreachable(exc, {})
    with pytest.raises(pytest.fail.Exception, match="CI=true but pip cannot reach PyPI"):
        skip_or_fail_unreachable(exc, {"CI": "true"})
