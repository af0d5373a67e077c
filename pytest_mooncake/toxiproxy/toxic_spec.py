"""A toxic as the API sees it (name, type, stream, toxicity, attributes), parsed from request
bodies with Toxiproxy's defaults and order of checks (``toxic_collection.go``)."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from pytest_mooncake.toxiproxy import errors
from pytest_mooncake.toxiproxy.link import DIRECTIONS, DOWNSTREAM
from pytest_mooncake.toxiproxy.names import brief, check_name
from pytest_mooncake.toxiproxy.toxics import TOXIC_TYPES, Toxic, ToxicAttributeError


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _json_float(value: float) -> float | int:
    """Toxiproxy (Go) writes a float32 1.0 as ``1``."""
    return int(value) if value == int(value) else value


@dataclass
class ToxicSpec:
    """A toxic as the API shows it: name, type, stream, toxicity and attributes."""

    name: str
    type: str
    stream: str
    toxicity: float
    toxic: Toxic

    def to_json(self) -> dict[str, Any]:
        return {"attributes": self.toxic.attributes(), "name": self.name, "type": self.type,
                "stream": self.stream, "toxicity": _json_float(self.toxicity)}

    @staticmethod
    def toxicity_of(body: dict[str, Any], default: float) -> float:
        if "toxicity" not in body:
            return default
        value = _number(body["toxicity"])
        if value is None or not 0.0 <= value <= 1.0:
            raise errors.BAD_REQUEST_BODY.joined(
                f"toxicity must be a number from 0 to 1, got {brief(body['toxicity'])}")
        return value

    @classmethod
    def create(cls, body: Any, taken: Container[str]) -> ToxicSpec:
        """Parse a toxic create body, with Toxiproxy's defaults and order of checks; ``taken``
        holds the names already used on the proxy."""
        if not isinstance(body, dict):
            raise errors.BAD_REQUEST_BODY.joined("expected a JSON object")
        for key in ("name", "type", "stream"):
            if not isinstance(body.get(key, ""), str):
                raise errors.BAD_REQUEST_BODY.joined(f"field {key!r} must be a string")
        stream = body.get("stream", DOWNSTREAM)
        if stream.lower() not in DIRECTIONS:
            raise errors.INVALID_STREAM
        stream = stream.lower()
        toxic_type = body.get("type", "")
        if toxic_type not in TOXIC_TYPES:
            raise errors.INVALID_TOXIC_TYPE.joined(
                f"{brief(toxic_type)} (known: {', '.join(sorted(TOXIC_TYPES))})")
        name = check_name(body.get("name", "") or f"{toxic_type}_{stream}", "toxic")
        if name in taken:
            raise errors.TOXIC_ALREADY_EXISTS
        toxicity = cls.toxicity_of(body, 1.0)
        return cls(name, toxic_type, stream, toxicity, _attributes(toxic_type, body, None))

    def updated(self, body: Any) -> ToxicSpec:
        """Toxiproxy's update: new attributes merge into the old ones; toxicity may change."""
        if not isinstance(body, dict):
            raise errors.BAD_REQUEST_BODY.joined("expected a JSON object")
        return ToxicSpec(self.name, self.type, self.stream,
                         self.toxicity_of(body, self.toxicity),
                         _attributes(self.type, body, self.toxic))


def _attributes(toxic_type: str, body: dict[str, Any], base: Toxic | None) -> Toxic:
    try:
        return TOXIC_TYPES[toxic_type].from_attributes(body.get("attributes"), base)
    except ToxicAttributeError as exc:
        raise errors.BAD_REQUEST_BODY.joined(str(exc)) from None
