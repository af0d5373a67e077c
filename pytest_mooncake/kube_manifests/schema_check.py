"""Offline validation of manifests against Kubernetes' own schemas (``kubernetes-validate``,
which ships the JSON schemas of every Kubernetes release): ``kubectl --dry-run=client`` would
be the first choice, but it still downloads the server's OpenAPI document and fails without a
server ("failed to download openapi ... connection refused", measured with kubectl 1.32)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

DEFAULT_KUBERNETES = "1.30"
INSTALL_HINT = "pip install kubernetes-validate (the project's extra: pip install -e '.[kubernetes]')"


class SchemaCheckUnavailable(RuntimeError):
    """No schema validator is installed; the message says how to install one."""


def problems(docs: Iterable[dict[str, Any]], kubernetes: str = DEFAULT_KUBERNETES) -> list[str]:
    """Every schema violation, as ``KIND/NAME: what``; strict (an unknown field is one)."""
    try:
        import kubernetes_validate  # noqa: PLC0415
        from kubernetes_validate.utils import (  # noqa: PLC0415
            SchemaNotFoundError,
            ValidationError,
        )
    except ImportError as exc:
        raise SchemaCheckUnavailable(f"cannot validate manifests offline: {exc}; "
                                     f"{INSTALL_HINT}") from None
    found = []
    for doc in docs:
        where = (f"{doc.get('kind', '?')}/"
                 f"{(doc.get('metadata') or {}).get('name', '?')}")
        try:
            kubernetes_validate.validate(doc, desired_version=kubernetes, strict=True)
        except ValidationError as exc:
            path = ".".join(str(p) for p in exc.path) or "(top)"
            found.append(f"{where}: {path}: {exc.message}")
        except SchemaNotFoundError as exc:
            found.append(f"{where}: no schema for it in Kubernetes {kubernetes}: {exc}")
    return found
