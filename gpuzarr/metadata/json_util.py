"""Small validators for JSON metadata; every error names the field it is about."""

from __future__ import annotations

import json
from typing import Any

from ..errors import MetadataError


def expect_dict(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MetadataError(f"{field}: expected an object, got {type(value).__name__}")
    return value


def expect_int(value: Any, field: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetadataError(f"{field}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise MetadataError(f"{field}: must be >= {minimum}, got {value}")
    return value


def expect_int_list(value: Any, field: str) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise MetadataError(f"{field}: expected a list of integers, got {value!r}")
    for i, v in enumerate(value):
        expect_int(v, f"{field}[{i}]")
    return list(value)


def expect_str(value: Any, field: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise MetadataError(f"{field}: expected a string, got {value!r}")
    if choices is not None and value not in choices:
        raise MetadataError(f"{field}: expected one of {list(choices)}, got {value!r}")
    return value


def split_name_configuration(value: Any, field: str) -> tuple[str, dict[str, Any]]:
    """Split ``"name"`` or ``{"name": ..., "configuration": {...}}`` into its two parts."""
    if isinstance(value, str):
        return value, {}
    if not isinstance(value, dict):
        raise MetadataError(f"{field}: expected an object with 'name', got {value!r}")
    name = value.get("name")
    if not isinstance(name, str):
        raise MetadataError(f"{field}.name: expected a string, got {name!r}")
    extra = set(value) - {"name", "configuration", "must_understand"}
    if extra:
        raise MetadataError(f"{field}: unexpected members {sorted(extra)}")
    return name, expect_dict(value.get("configuration"), f"{field}.configuration")


def check_attributes(attributes: Any) -> None:
    """Raise MetadataError unless ``attributes`` can be written as strict JSON (no NaN)."""
    try:
        json.dumps(attributes, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"attributes: values must be JSON-serialisable ({exc})") from exc
