"""Images of Mooncake releases built here: the release's wheel imports inside its image, the
real mooncake_master is first on PATH, and a second build of the same recipe is the cached one."""

from __future__ import annotations

import pytest

from pytest_mooncake.images.__main__ import is_image_reference
from pytest_mooncake.images.debian_rootfs import apt_mirror
from pytest_mooncake.images.release_image import ensure_release_image

RELEASE = "0.3.13.post1"


def test_second_build_of_a_release_is_the_cached_image(container_engine):
    first, _ = ensure_release_image(container_engine.client, RELEASE, lambda _m: None)
    again, built = ensure_release_image(container_engine.client, RELEASE, lambda _m: None)
    assert not built and again.id == first.id
    assert first.labels["org.opencontainers.image.version"] == RELEASE
    # detached, waited for, its logs read, then removed: run(remove=True) through podman's
    # Docker API read the logs of the auto-removed container before the import's line was in
    # them (failed in a CI run, then 5 of 6 runs in a row; this way 0 of 9)
    box = container_engine.client.containers.run(
        first.id, ["sh", "-c", "command -v mooncake_master; command -v etcd; python3 -c "
                   "'import mooncake.engine, mooncake.store; print(\"imports\")'"],
        network_mode="none", detach=True, labels=container_engine.labels)
    try:
        status = box.wait(timeout=120)
        out = box.logs(stdout=True, stderr=False).decode()
        errors = box.logs(stdout=False, stderr=True).decode()
    finally:
        box.remove(force=True)
    assert status["StatusCode"] == 0, errors
    assert out.split() == ["/usr/local/bin/mooncake_master", "/usr/bin/etcd", "imports"], errors


@pytest.mark.parametrize("text, image", [("0.3.13.post1", False), ("0.3.14", False),
                                         ("kvcacheai/mooncake:0.3.13", True),
                                         ("mooncake:latest", True)])
def test_release_versions_and_image_references_are_told_apart(text, image):
    assert is_image_reference(text) is image


def test_mirror_is_read_from_the_apt_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("MC_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\n")
    assert apt_mirror(tmp_path) == "http://mirror.example/debian"
    monkeypatch.setenv("MC_DEBIAN_MIRROR", "http://other/debian")
    assert apt_mirror(tmp_path) == "http://other/debian"
