"""What a container of an emulated RDMA fabric is given (``placements/container_fabric.py``):
the host's pid namespace and the fabric's and library's directories, only when its environment
names a fabric; the image's own library path kept behind the emulated library's."""

from __future__ import annotations

from pytest_mooncake.targets.mooncake.placements.container_fabric import (
    ImageEnvironment,
    fabric_run_options,
)
from pytest_mooncake.verbs import EmulatedFabric


def test_a_component_without_a_fabric_gets_nothing_extra():
    assert fabric_run_options({"MC_TCP_BIND_ADDRESS": "198.19.224.2"}, {}) == {}


def test_a_fabric_component_shares_host_pids_and_sees_the_fabric_and_library(tmp_path):
    mounted = {str(tmp_path / "work"): {"bind": str(tmp_path / "work"), "mode": "rw"}}
    fabric = EmulatedFabric.create(["mlx5_0"], run_dir=tmp_path / "vf1", seed=3)
    try:
        options = fabric_run_options(fabric.environ(), mounted)
        assert options["pid_mode"] == "host"  # control sockets and peers' copies use host pids
        volumes = options["volumes"]
        assert volumes[str(fabric.run_dir)] == {"bind": str(fabric.run_dir), "mode": "rw"}
        cache = fabric.library.parent.parent  # the library and the libmlx5 stub it links
        assert volumes[str(cache)] == {"bind": str(cache), "mode": "ro"}
        assert mounted[str(tmp_path / "work")] == volumes[str(tmp_path / "work")]
    finally:
        fabric.close()


def test_a_run_directory_inside_a_mounted_one_is_not_mounted_twice(tmp_path):
    work = str(tmp_path / "work")
    fabric = EmulatedFabric.create(["mlx5_0"], run_dir=tmp_path / "work" / "vf1", seed=3)
    try:
        volumes = fabric_run_options(fabric.environ(), {work: {"bind": work, "mode": "rw"}})
        assert str(fabric.run_dir) not in volumes["volumes"]
    finally:
        fabric.close()


def test_the_image_library_path_stays_behind_the_emulated_library(tmp_path):
    image = type("Image", (), {"attrs": {"Config": {"Env": [
        "PATH=/usr/bin", "LD_LIBRARY_PATH=/opt/mooncake/standins"]}}})()
    fabric = EmulatedFabric.create(["mlx5_0"], run_dir=tmp_path / "vf1", seed=3)
    try:
        env = fabric.apply(ImageEnvironment.of(image).env({"MC_SLICE_SIZE": "4096"}))
        assert env["LD_LIBRARY_PATH"] == f"{fabric.library.parent}:/opt/mooncake/standins"
        assert env["MC_SLICE_SIZE"] == "4096" and "PATH" not in env  # the image keeps its own
    finally:
        fabric.close()
