"""The native builder compiles a shipped C source once per content and says why it could not."""

from __future__ import annotations

import ctypes
import subprocess

import pytest

from pytest_mooncake.runtime.native import NativeBuildError, build_shared_library, cache_dir


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MC_CACHE_DIR", str(tmp_path / "cache"))


def _source(tmp_path, body: str):
    src = tmp_path / "answer.c"
    src.write_text(body)
    return src


def test_builds_loads_and_records_the_soname(tmp_path):
    src = _source(tmp_path, "int answer(void) { return 42; }\n")
    lib = build_shared_library("libanswer.so.7", [src])
    assert lib.parent.parent == cache_dir("native")
    assert ctypes.CDLL(str(lib)).answer() == 42
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    assert "[libanswer.so.7]" in dyn


def test_same_source_is_built_once_and_a_changed_one_again(tmp_path):
    src = _source(tmp_path, "int answer(void) { return 1; }\n")
    first = build_shared_library("libanswer.so", [src])
    stamp = first.stat().st_mtime_ns
    assert build_shared_library("libanswer.so", [src]) == first
    assert first.stat().st_mtime_ns == stamp
    src.write_text("int answer(void) { return 2; }\n")
    second = build_shared_library("libanswer.so", [src])
    assert second != first
    assert ctypes.CDLL(str(second)).answer() == 2


def test_a_compile_error_names_the_compiler_output_and_leaves_nothing(tmp_path):
    src = _source(tmp_path, "int answer(void) { return undefined_name; }\n")
    with pytest.raises(NativeBuildError, match="undefined_name"):
        build_shared_library("libbroken.so", [src])
    leftovers = [p for p in cache_dir("native").rglob("*") if p.is_file() and p.name != ".lock"]
    assert leftovers == []


def test_no_compiler_says_what_to_install(tmp_path, monkeypatch):
    src = _source(tmp_path, "int answer(void) { return 3; }\n")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(NativeBuildError, match="apt-get install -y gcc"):
        build_shared_library("libanswer.so", [src])
