"""pip's own answer from PyPI for a release version that does not exist (marker ``release``).

In a module of its own: the fake-index settings other modules hold for their tests must not
reach this one.
"""

from __future__ import annotations

import pytest
from release_choice import skip_or_fail_unreachable

from pytest_mooncake.releases import ReleaseFetchError, ensure_env


@pytest.mark.release
def test_pypi_itself_names_an_unknown_version(own_cache):
    with pytest.raises(ReleaseFetchError) as err:
        ensure_env("mooncake-non-cuda==0.0.999")
    if err.value.unreachable:
        skip_or_fail_unreachable(err.value)
    assert "No matching distribution found for mooncake-transfer-engine-non-cuda==0.0.999" \
        in str(err.value)
    assert "0.3.13.post1" in err.value.output  # pip listed the versions PyPI has
    assert err.value.command.endswith("mooncake-transfer-engine-non-cuda==0.0.999")
