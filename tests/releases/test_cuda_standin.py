"""The no-device CUDA driver stand-in: what it answers, and that it is used only where the
machine has no real libcuda.so.1 and never with a symbol gap."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from pytest_mooncake.releases import StandInError, ensure_env, envs, loader
from pytest_mooncake.releases.standins import STAND_INS

STANDIN = STAND_INS["libcuda.so.1"]

CALLS = textwrap.dedent("""
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    n = ctypes.c_int(7)
    s = ctypes.c_char_p()
    out = {
        "cuInit": lib.cuInit(0),
        "cuDeviceGetCount": [lib.cuDeviceGetCount(ctypes.byref(n)), n.value],
        "cuGetErrorString": [lib.cuGetErrorString(100, ctypes.byref(s)), s.value.decode()],
        "cuGetErrorName": [lib.cuGetErrorName(100, ctypes.byref(s)), s.value.decode()],
        "marker": (ctypes.c_char * 16).in_dll(lib, "pytest_mooncake_cuda_standin").value.decode(),
    }
    print(json.dumps(out))
""")


def test_every_driver_call_says_no_device_and_error_strings_are_real(own_cache):
    lib = STANDIN.build()
    out = subprocess.run([sys.executable, "-c", CALLS, str(lib)], capture_output=True, text=True,
                         timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got["cuInit"] == 100
    assert got["cuDeviceGetCount"] == [100, 0]
    assert got["cuGetErrorString"][0] == 0 and "no CUDA-capable device" in got["cuGetErrorString"][1]
    assert got["cuGetErrorName"] == [0, "CUDA_ERROR_NO_DEVICE"]
    assert got["marker"] == "pytest-mooncake "


def test_the_stand_in_exports_every_function_its_source_defines(own_cache):
    source = STANDIN.source_path.read_text()
    defined = set(re.findall(r"^CUresult (cu\w+)\(", source, re.M))
    assert len(defined) > 30
    assert defined <= STANDIN.exported()


FAKE = "mooncake-non-cuda==0.0.1"
RUN_ENGINE = textwrap.dedent("""
    import ctypes, sys
    engine = ctypes.CDLL(sys.argv[1])
    print(engine.mc_fake_cuinit())
""")


def _engine_call(env) -> int:
    out = subprocess.run([str(env.python), "-c", RUN_ENGINE, str(env.package_dir / "engine.so")],
                         env=env.env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_used_where_the_loader_finds_no_libcuda(own_cache, offline_index, no_real_libcuda):
    env = ensure_env(FAKE)
    assert env.standins == ["libcuda.so.1"]
    assert env.libraries().describe() == "CUDA: stand-in driver, no device"
    assert env.unresolved("engine.so") == []
    assert _engine_call(env) == 100  # the release's code reached the stand-in


def test_a_stand_in_on_the_callers_library_path_is_not_taken_for_a_real_driver(
        own_cache, offline_index, no_real_libcuda, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(STANDIN.build().parent))
    loader._dlopen.cache_clear()
    envs._plan.cache_clear()
    assert loader.system_libraries(["libcuda.so.1"])["libcuda.so.1"] is None
    assert ensure_env(FAKE).standins == ["libcuda.so.1"]


def test_a_real_driver_is_used_instead(own_cache, offline_index, tmp_path, monkeypatch):
    real_dir = tmp_path / "driver"
    real_dir.mkdir()
    src = tmp_path / "real.c"
    src.write_text("int cuInit(unsigned int f) { (void)f; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(real_dir / "libcuda.so.1"),
                    "-Wl,-soname,libcuda.so.1", str(src)], check=True, capture_output=True)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(real_dir))
    loader._dlopen.cache_clear()
    envs._plan.cache_clear()
    env = ensure_env(FAKE)
    assert env.standins == []
    assert env.libraries().describe() == f"CUDA: real driver {real_dir / 'libcuda.so.1'}"
    assert _engine_call(env) == 0  # the real one answered
    assert not list((own_cache / "native").glob("libcuda.so.1-*/libcuda.so.1")), \
        "the stand-in was built although a real driver exists"


def test_a_release_importing_a_symbol_the_stand_in_lacks_fails_naming_it(
        own_cache, offline_index, no_real_libcuda):
    with pytest.raises(StandInError) as err:
        ensure_env("mooncake-non-cuda==0.0.2")
    text = str(err.value)
    assert "engine.so: cuNotInTheStandIn" in text
    assert str(STANDIN.source_path) in text
    assert "cuInit" not in text.split("(", 1)[1].split(")")[0]  # only the gap is named


@pytest.mark.release
def test_the_stand_in_covers_every_driver_symbol_of_0_3_14(real_release):
    env = real_release("0.3.14")
    imports = env.manifest["driver_imports"]
    assert "engine.so" in imports and "transfer_engine_bench" in imports
    assert "cuInit" in imports["engine.so"]
    assert STANDIN.gaps(imports) == {}
