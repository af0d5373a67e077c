"""Reading a TOML file into a pydantic model, with errors that name the file and the field.

pydantic (v2) validates; this module only says what it found the way a person fixing the file
needs it: ``FILE: field 'pairs[0].reader': unknown implementation 'nope' (listed: a, b)``. Field
paths use the file's own keys, dotted, with ``[i]`` for array items. Rules that span fields
(every pair names every role) are validators of the model that raise ``problem(...)`` with the
path of the field at fault.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

M = TypeVar("M", bound=BaseModel)


class StrictTable(BaseModel):
    """A TOML table: no unknown keys, no type coercion, immutable once read."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _target_spec(value: str) -> str:
    if not value.strip():
        raise ValueError('must be a non-empty string like "reference:legacy"')
    return value.strip()


TargetSpec = Annotated[str, AfterValidator(_target_spec)]
"""A target as ``--mc-target`` spells it (``NAME[:VARIANT]``)."""


class SchemaError(ValueError):
    """A TOML file is missing, not TOML, or not what its schema says; the message names the
    file and the field."""


def problem(loc: tuple[str | int, ...], message: str, value: Any = None) -> ValidationError:
    """A validation error at ``loc`` (raise it from a model validator): the cross-field rules
    point at the field to fix, not at the whole file."""
    return ValidationError.from_exception_data("schema", [InitErrorDetails(
        type=PydanticCustomError("schema", "{message}", {"message": message}), loc=loc,
        input=value)])


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; ``SchemaError`` when it cannot be read or is not TOML."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SchemaError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SchemaError(f"{path}: is a directory, not a TOML file") from None
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: not valid TOML ({exc})") from None


def load(model: type[M], path: Path, context: dict[str, Any] | None = None) -> M:
    """``path`` read and validated as ``model``; ``SchemaError`` for the first problem."""
    return validate(model, read_toml(path), path, context)


def validate(model: type[M], doc: Any, path: Path, context: dict[str, Any] | None = None) -> M:
    try:
        return model.model_validate(doc, context=context)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise SchemaError(f"{path}: field '{field_path(first['loc']) or '(top level)'}': "
                          f"{explain(model, first)}") from None


def field_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(model: type[BaseModel], error: dict[str, Any]) -> str:
    """pydantic's message, in the file's words."""
    kind, value, loc = error["type"], error.get("input"), tuple(error["loc"])
    if kind == "schema":
        return str(error["ctx"]["message"])
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "missing":
        info = _field_info(model, loc)
        hint = f": {info.description}" if info is not None and info.description else ""
        return f"missing{hint}"
    if kind == "extra_forbidden":
        known = _known_fields(model, loc[:-1])
        return f"unknown field (known: {', '.join(known)})" if known else "unknown field"
    if kind in ("list_type", "tuple_type"):
        return f"expected an array, got {_toml_type(value)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a table, got {_toml_type(value)}"
    if kind == "string_type":
        return f"expected a string, got {value!r}"
    if kind in ("too_short", "string_too_short"):
        return f"must not be empty (got {value!r})"
    return f"{error['msg']} (got {value!r})"


def _toml_type(value: Any) -> str:
    return {str: "a string", int: "an integer", float: "a float", bool: "a boolean",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _walk(model: Any, loc: tuple[str | int, ...]) -> Any:
    """The type found at ``loc`` inside ``model`` (None where the path leaves the schema)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif origin in (list, tuple) and isinstance(part, int):
            current = typing.get_args(current)[0]
        elif origin is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    return _unwrap(current)


def _unwrap(tp: Any) -> Any:
    """``X | None`` and ``Annotated[X, ...]`` to ``X``."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _known_fields(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    owner = _walk(model, loc)
    if isinstance(owner, type) and issubclass(owner, BaseModel):
        return sorted(owner.model_fields)
    return []


def _field_info(model: type[BaseModel], loc: tuple[str | int, ...]) -> Any:
    owner = _walk(model, loc[:-1])
    if isinstance(owner, type) and issubclass(owner, BaseModel) and isinstance(loc[-1], str):
        return owner.model_fields.get(loc[-1])
    return None
