"""``mc_skew``: version-skew runs, one test run per pair of implementations in a matrix.

A test opts in with ``@pytest.mark.mc_skew("MATRIX")`` and requests the ``mc_skew`` fixture;
it is parametrized at collection over the pairs of ``fixtures/skew/MATRIX.toml`` (ids like
``writer=reference:legacy-reader=reference``). ``mc_skew.target("writer")`` is the ``Target``
of that role, built with ``resolve_target`` and opened like ``mc_target``; every target opened
is closed at teardown. ``mc_skew.require("client", "foreign_master")`` is that target after
checking its capabilities. Engines, master clusters and store clients a role's target starts
(``start_engine``, ``master_cluster``, ``store_client``) have their logs shown when the test
fails; clusters and clients are closed when it ends. A ``TargetLacks`` from a role's target
(the test is n/a) names the role: ``skew role client (mooncake): ...``.

A role naming an external target (``mooncake``, ``mooncake:SPEC``, ``docker:IMAGE``,
``cluster:FILE``) gets a fresh instance of it, on the session's etcd; where that build is not
available here (no wheel installed, a requirement the installed wheel does not satisfy, no
Docker engine) its pairs are n/a with the target's reason, never an error. ``reference``
variants are checked when the matrix loads (``reference:legcy`` is a usage error).

Matrix file (TOML)::

    description = "..."                 # optional
    roles = ["writer", "reader"]        # required: the sides of the pair
    [implementations.NAME]              # one table per implementation a pair may use
    target = "reference:legacy"         # optional, as --mc-target spells it; default NAME;
                                        # "@target" is the target under test (--mc-target)
    description = "..."                 # optional
    [[pairs]]                           # one or more; every role named, nothing else
    writer = "NAME"
    reader = "NAME"

``MATRIX`` is looked up as ``<rootdir>/fixtures/skew/MATRIX.toml``, then in this project's
``fixtures/skew``; a value ending in ``.toml`` is a path (relative to the test file, then to
the rootdir). Unknown matrices and malformed files are usage errors naming file and field.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_mooncake.logs import attach_log
from pytest_mooncake.targets import (
    KNOWN_TARGETS,
    Capability,
    Target,
    TargetContext,
    TargetLacks,
    UnknownTarget,
    resolve_target,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MARKER = "mc_skew"
SESSION_TARGET = "@target"
"""An implementation whose ``target`` is this names the target under test (``--mc-target``)."""
BUILTIN_TARGETS = ("reference",)
"""Targets resolved when a matrix is loaded (a bad variant is a usage error). The others are
external builds resolved at first use, where one that is not available makes its pairs n/a."""
PROJECT_SKEW_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "skew"
_TOP_FIELDS = {"description", "roles", "implementations", "pairs"}
_IMPL_FIELDS = {"target", "description"}


class SkewMatrixError(ValueError):
    """A skew matrix is missing or malformed; the message names the file and field."""


@dataclass(frozen=True)
class Implementation:
    name: str
    target: str
    description: str = ""


@dataclass(frozen=True)
class SkewPair:
    """One parametrization: which implementation each role runs."""

    matrix: SkewMatrix
    roles: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return "-".join(f"{role}={impl}" for role, impl in self.roles)

    def implementation(self, role: str) -> Implementation:
        return self.matrix.implementations[dict(self.roles)[role]]

    def __repr__(self) -> str:
        return f"SkewPair({self.id})"


@dataclass(frozen=True)
class SkewMatrix:
    name: str
    path: Path
    roles: tuple[str, ...]
    implementations: dict[str, Implementation]
    pairs: tuple[SkewPair, ...]
    description: str = ""


# ------------------------------------------------------------------ loading


def load_matrix(path: Path, name: str | None = None) -> SkewMatrix:
    """Parse and validate one matrix file."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SkewMatrixError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SkewMatrixError(f"{path}: not valid TOML ({exc})") from None

    def bad(field: str, why: str) -> SkewMatrixError:
        return SkewMatrixError(f"{path}: field '{field}': {why}")

    unknown = sorted(set(doc) - _TOP_FIELDS)
    if unknown:
        raise bad(unknown[0], f"unknown field (known: {', '.join(sorted(_TOP_FIELDS))})")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise bad("description", "must be a string")

    roles = doc.get("roles")
    if not isinstance(roles, list) or not roles:
        raise bad("roles", "required: a non-empty list of role names, e.g. [\"writer\", \"reader\"]")
    for i, role in enumerate(roles):
        if not isinstance(role, str) or not role.strip() or "=" in role or "-" in role:
            raise bad(f"roles[{i}]", f"must be a non-empty name without '=' or '-' (got {role!r})")
    if len(set(roles)) != len(roles):
        raise bad("roles", f"role names must be unique (got {roles})")

    impls_doc = doc.get("implementations")
    if not isinstance(impls_doc, dict) or not impls_doc:
        raise bad("implementations", "required: one [implementations.NAME] table per implementation")
    implementations = {}
    for impl_name, spec in impls_doc.items():
        where = f"implementations.{impl_name}"
        if not isinstance(spec, dict):
            raise bad(where, "must be a table")
        extra = sorted(set(spec) - _IMPL_FIELDS)
        if extra:
            raise bad(f"{where}.{extra[0]}", f"unknown field (known: {', '.join(sorted(_IMPL_FIELDS))})")
        target = spec.get("target", impl_name)
        if not isinstance(target, str) or not target.strip():
            raise bad(f"{where}.target", "must be a non-empty string like \"reference:legacy\"")
        kind = target.strip().partition(":")[0]
        if target.strip() != SESSION_TARGET and kind not in KNOWN_TARGETS:
            raise bad(f"{where}.target", f"unknown target {target!r} (known targets: "
                      f"{', '.join(sorted(KNOWN_TARGETS))})")
        if kind in BUILTIN_TARGETS:
            try:
                resolve_target(target)
            except UnknownTarget as exc:
                raise bad(f"{where}.target", str(exc)) from None
        text = spec.get("description", "")
        if not isinstance(text, str):
            raise bad(f"{where}.description", "must be a string")
        implementations[impl_name] = Implementation(impl_name, target.strip(), text)

    pairs_doc = doc.get("pairs")
    if not isinstance(pairs_doc, list) or not pairs_doc:
        raise bad("pairs", "required: one or more [[pairs]] tables naming an implementation per role")
    matrix = SkewMatrix(name or path.stem, path, tuple(roles), implementations, (), description)
    pairs = []
    for i, entry in enumerate(pairs_doc):
        where = f"pairs[{i}]"
        if not isinstance(entry, dict):
            raise bad(where, "must be a table")
        missing = [r for r in roles if r not in entry]
        if missing:
            raise bad(f"{where}.{missing[0]}", "missing: every pair names an implementation "
                      f"for each role ({', '.join(roles)})")
        extra = sorted(set(entry) - set(roles))
        if extra:
            raise bad(f"{where}.{extra[0]}", f"not a role of this matrix (roles: {', '.join(roles)})")
        for role in roles:
            if entry[role] not in implementations:
                raise bad(f"{where}.{role}", f"unknown implementation {entry[role]!r} "
                          f"(listed: {', '.join(implementations)})")
        pairs.append(SkewPair(matrix, tuple((r, entry[r]) for r in roles)))
    object.__setattr__(matrix, "pairs", tuple(pairs))
    return matrix


def search_dirs(config: pytest.Config) -> list[Path]:
    dirs = [Path(config.rootpath) / "fixtures" / "skew", PROJECT_SKEW_DIR]
    out: list[Path] = []
    for d in dirs:
        if d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


def find_matrix(name: str, config: pytest.Config, test_dir: Path | None = None) -> Path:
    """The file of the matrix named ``name`` (or a ``.toml`` path)."""
    if name.endswith(".toml"):
        bases = ([test_dir] if test_dir else []) + [Path(config.rootpath)]
        for base in bases:
            if (base / name).is_file():
                return base / name
        raise SkewMatrixError(f"mc_skew: no matrix file {name!r} (looked in "
                              f"{', '.join(str(b) for b in bases)})")
    dirs = search_dirs(config)
    for d in dirs:
        if (d / f"{name}.toml").is_file():
            return d / f"{name}.toml"
    available = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
    raise SkewMatrixError(
        f"mc_skew: unknown skew matrix {name!r}: no {name}.toml in "
        f"{', '.join(str(d) for d in dirs)} (available: {', '.join(available) or 'none'})"
    )


# ------------------------------------------------------------------ pytest hooks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mc_skew(MATRIX): run the test once per pair of the version-skew matrix "
        "fixtures/skew/MATRIX.toml; the mc_skew fixture gives each role's target",
    )


SKEW_PROBLEMS = pytest.StashKey[list[str]]()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marks = list(metafunc.definition.iter_markers(MARKER))
    if not marks:
        return
    where = metafunc.definition.nodeid
    try:
        if len(marks) > 1 or len(marks[0].args) != 1 or not isinstance(marks[0].args[0], str):
            raise SkewMatrixError("use exactly one @pytest.mark.mc_skew(\"MATRIX\")")
        if "mc_skew" not in metafunc.fixturenames:
            raise SkewMatrixError("a test marked mc_skew must request the mc_skew fixture")
        name = marks[0].args[0]
        matrix = load_matrix(find_matrix(name, metafunc.config,
                                         Path(metafunc.definition.path).parent), name)
    except SkewMatrixError as exc:
        # Reported as one usage error after collection (see below), not as a traceback.
        metafunc.config.stash.setdefault(SKEW_PROBLEMS, []).append(f"{where}: {exc}")
        if "mc_skew" in metafunc.fixturenames:
            metafunc.parametrize("mc_skew", [None], ids=["invalid-skew-matrix"], indirect=True)
        return
    metafunc.parametrize("mc_skew", matrix.pairs, ids=[p.id for p in matrix.pairs],
                         indirect=True)


def pytest_collection_modifyitems(config: pytest.Config) -> None:
    problems = config.stash.get(SKEW_PROBLEMS, [])
    if problems:
        raise pytest.UsageError("mc_skew:\n  " + "\n  ".join(dict.fromkeys(problems)))


class Skew:
    """The pair a test runs under, and each role's target (opened on first use)."""

    def __init__(self, pair: SkewPair, open_target: Any):
        self.pair = pair
        self._open = open_target
        self._targets: dict[str, Target] = {}
        self._closers: list[Callable[[], None]] = []
        """What the roles' targets started for this test (master clusters, store clients), in
        start order; closed in reverse before the targets."""

    @property
    def matrix(self) -> SkewMatrix:
        return self.pair.matrix

    @property
    def roles(self) -> tuple[str, ...]:
        return self.matrix.roles

    @property
    def id(self) -> str:
        return self.pair.id

    def implementation(self, role: str) -> Implementation:
        self._check(role)
        return self.pair.implementation(role)

    def target(self, role: str) -> Target:
        """The opened ``Target`` running ``role``'s implementation (one per role). An external
        target that is not available here (e.g. ``mooncake:REQUIREMENT`` the installed wheel
        does not satisfy) raises ``TargetLacks``: the pair is n/a, naming the role."""
        self._check(role)
        if role not in self._targets:
            self._targets[role] = self._open(role, self.pair.implementation(role), self)
        return self._targets[role]

    def require(self, role: str, *capabilities: Capability | str) -> Target:
        """``role``'s target, after checking it has every capability: where it lacks one the
        test is n/a (``TargetLacks``) with the target's reason, naming the role."""
        target = self.target(role)
        for capability in capabilities:
            reason = target.missing(capability)
            if reason:
                raise TargetLacks(capability, f"{self.role_text(role)}: {reason}")
        return target

    def role_text(self, role: str) -> str:
        """``skew role master (reference:legacy)``: how n/a reasons name a role."""
        impl = self.implementation(role)
        if impl.target == SESSION_TARGET:
            return f"skew role {role} (the target under test)"
        if impl.name == impl.target:
            return f"skew role {role} ({impl.target})"
        return f"skew role {role} ({impl.name}: {impl.target})"

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def _check(self, role: str) -> None:
        if role not in self.roles:
            raise KeyError(f"no role {role!r} in skew matrix {self.matrix.name} "
                           f"(roles: {', '.join(self.roles)})")

    def close(self) -> None:
        errors: list[BaseException] = []
        while self._closers:
            try:
                self._closers.pop()()
            except Exception as exc:  # noqa: BLE001 (close the rest, then report)
                errors.append(exc)
        while self._targets:
            _, target = self._targets.popitem()
            target.close()
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        return f"Skew({self.matrix.name}: {self.id})"


class _Borrowed:
    """The session's target lent to a skew role: usable, but closed by its owner, not here."""

    def __init__(self, target: Target):
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def close(self) -> None:
        pass


class _RoleTarget:
    """A role's target as a test sees it: what its factories start is shown (and attached)
    when the test fails, as ``mc_engine`` and ``mc_master_cluster`` do for the session target;
    master clusters and store clients it starts are closed when the test ends; and a
    ``TargetLacks`` from a factory names the role."""

    def __init__(self, target: Any, request: pytest.FixtureRequest, role: str, skew: Skew):
        self._target = target
        self._request = request
        self._role = role
        self._skew = skew

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def _lacks(self, exc: TargetLacks) -> TargetLacks:
        return TargetLacks(exc.capability, f"{self._skew.role_text(self._role)}: {exc.reason}")

    def _naming_the_role(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return factory(*args, **kwargs)
        except TargetLacks as exc:
            raise self._lacks(exc) from None

    def start_engine(self, segment: str, metadata: Any, **options: Any) -> Any:
        engine = self._naming_the_role(self._target.start_engine, segment, metadata, **options)
        attach_log(self._request, f"engine {segment} log ({self._role}: {self._target.label})",
                   engine.logs)
        return engine

    def master_cluster(self, masters: int = 2, clients: int = 1, **options: Any) -> Any:
        cluster = self._naming_the_role(self._target.master_cluster, masters=masters,
                                        clients=clients, **options)
        self._skew.on_close(cluster.close)
        attach_log(self._request, f"master cluster logs ({self._role}: {self._target.label})",
                   cluster.logs)
        return cluster

    def store_client(self, master: Any, client_id: str | None = None, version: str | None = None,
                     wait_attached: bool = True) -> Any:
        client = self._naming_the_role(self._target.store_client, master, client_id=client_id,
                                       version=version, wait_attached=wait_attached)
        self._skew.on_close(client.stop)
        process = getattr(client, "process", None)
        if process is not None and hasattr(process, "log_text"):
            attach_log(self._request, f"store client {client_id or ''} log ({self._role}: "
                       f"{self._target.label})", process.log_text)
        return client

    def store_client_lacks(self, master: Any, version: str | None = None) -> TargetLacks | None:
        lacks = self._target.store_client_lacks(master, version)
        return self._lacks(lacks) if lacks else None


@pytest.fixture
def mc_skew(request: pytest.FixtureRequest, mc_config: Any, mc_target: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Skew]:
    """The version-skew pair of this run (needs ``@pytest.mark.mc_skew("MATRIX")``). It
    depends on ``mc_target`` so that under ``--mc-matrix`` a skew test runs once per column and
    ``"@target"`` is that column's target."""
    pair = getattr(request, "param", None)
    if not isinstance(pair, SkewPair):
        raise pytest.UsageError(
            f"{request.node.nodeid}: the mc_skew fixture needs @pytest.mark.mc_skew(\"MATRIX\") "
            f"naming a matrix in fixtures/skew/"
        )

    def etcd_endpoints() -> list[str]:
        return list(request.getfixturevalue("mc_etcd").endpoints)

    def open_target(role: str, impl: Implementation, skew: Skew) -> Any:
        if impl.target == SESSION_TARGET:
            return _RoleTarget(_Borrowed(mc_target), request, role, skew)
        try:
            target = resolve_target(impl.target)
        except UnknownTarget as exc:
            # Built-in targets were resolved when the matrix was loaded; an external one (a
            # wheel, an install directory, an image, a manifest) may simply not be here.
            raise TargetLacks(Capability.VERSION_SKEW, f"{skew.role_text(role)} is not "
                              f"available here: {exc}") from None
        target.open(TargetContext(
            seed=mc_config.seed,
            workdir=tmp_path_factory.mktemp(f"mc-skew-{role}-" + impl.name.replace(":", "-")),
            etcd_endpoints=etcd_endpoints,
            options=dict(mc_config.raw),
        ))
        return _RoleTarget(target, request, role, skew)

    skew = Skew(pair, open_target)
    try:
        yield skew
    finally:
        skew.close()
