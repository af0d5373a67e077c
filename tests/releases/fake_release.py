"""A tiny wheel that installs like a Mooncake release, for testing environments without PyPI.

It is a real wheel (pip installs it from a find-links directory with no index) holding a
``mooncake`` package whose ``engine.so`` is real ELF that links ``libcuda.so.1`` and calls
``cuInit`` (``mc_fake_cuinit``), plus an executable ``mooncake_master`` script. So the
environment code scans, supplies and runs it exactly as it does a real release.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

ENGINE_C = """
extern int cuInit(unsigned int flags);
%(extra_decl)s
int mc_fake_cuinit(void) { return cuInit(0); }
%(extra_use)s
"""
MASTER = "#!/bin/sh\necho 'fake mooncake_master'\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_engine(out: Path, libcuda: Path, extra_symbol: str | None = None) -> Path:
    """``engine.so`` linking ``libcuda`` (its soname is recorded as DT_NEEDED); with
    ``extra_symbol`` it also imports that driver symbol (left undefined: shared objects may)."""
    src = out.with_suffix(".c")
    src.write_text(ENGINE_C % {
        "extra_decl": f"extern int {extra_symbol}(void);" if extra_symbol else "",
        "extra_use": f"int mc_fake_extra(void) {{ return {extra_symbol}(); }}" if extra_symbol else "",
    })
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), str(libcuda)],
                   check=True, capture_output=True)
    return out


def build_wheel(wheel_dir: Path, version: str, engine_so: Path,
                flavour: str = "non-cuda") -> Path:
    """``mooncake_transfer_engine_<flavour>-<version>-py3-none-any.whl`` in ``wheel_dir``."""
    dist = f"mooncake_transfer_engine_{flavour.replace('-', '_')}"
    info = f"{dist}-{version}.dist-info"
    files: dict[str, tuple[bytes, int]] = {
        "mooncake/__init__.py": (b"", 0o644),
        "mooncake/engine.so": (engine_so.read_bytes(), 0o755),
        "mooncake/mooncake_master": (MASTER.encode(), 0o755),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: mooncake-transfer-engine-{flavour}\n"
                             f"Version: {version}\n".encode(), 0o644),
        f"{info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: pytest-mooncake-tests\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n", 0o644),
    }
    record = [_record_line(name, data) for name, (data, _mode) in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = (("\n".join(record) + "\n").encode(), 0o644)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    path = wheel_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in files.items():
            zi = zipfile.ZipInfo(name)
            zi.external_attr = (0o100000 | mode) << 16
            zf.writestr(zi, data)
    return path


def offline_pip_env(wheel_dir: Path) -> dict[str, str]:
    """pip settings that install only from ``wheel_dir`` (no index, no config files)."""
    return {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheel_dir),
            "PIP_EXTRA_INDEX_URL": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
