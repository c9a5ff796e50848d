"""Small validators for JSON metadata; every error names the field it is about."""

from __future__ import annotations

import contextlib
import json
import math
import re
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError

if TYPE_CHECKING:
    from collections.abc import Iterator

#: How deeply metadata JSON may nest. Everything that walks a document (json.dumps, deepcopy,
#: consolidated metadata's nested groups, users' own code) recurses once or twice per level, and
#: Python stops at 1000 frames; zarrs (serde_json) refuses documents deeper than 128 too.
MAX_JSON_DEPTH = 128


#: How much deeper a node's attributes lie in the documents that hold them: its own document
#: (``zarr.json``: the document, then ``attributes``), and a consolidated group's (``zarr.json``:
#: ``consolidated_metadata``, ``metadata``, the node's document, ``attributes``; ``.zmetadata``:
#: ``metadata``, the ``.zattrs`` entry). Attributes are held to ``MAX_JSON_DEPTH`` less this,
#: so that every document that holds them can be read back (by gpuzarr and zarrs).
ATTRIBUTES_NESTED_BY = 4


def check_depth(value: Any, where: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise MetadataError when ``value`` nests objects and lists deeper than ``limit``.

    Iterative, so that the check itself cannot exhaust the stack it protects.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            raise MetadataError(f"{where}: JSON nests deeper than {limit} levels")
        # Containers only: a tuple per number of a long list took six times the memory of
        # parsing it (a 30 MB document, 1.3 GB).
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


#: An escape in a JSON string (``\\"``, ``\\\\``, ...): left out, every quote left delimits a string.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NESTING = np.zeros(256, np.int8)
_NESTING[[ord("["), ord("{")]] = 1
_NESTING[[ord("]"), ord("}")]] = -1
_QUOTE = ord('"')
#: Bytes of a document's text counted at once by :func:`text_depth`.
_DEPTH_BLOCK = 1 << 23


def text_depth(raw: bytes | str) -> int:
    """How deeply the JSON text ``raw`` nests arrays and objects (1: one container), counted
    on the text in C (NumPy) with the brackets inside strings left out: walking the parsed
    document took 23 ms for an 870 KB consolidated zarr.json, a regular expression over its
    strings 5 ms."""
    text = raw.encode() if isinstance(raw, str) else bytes(raw)
    encoding = json.detect_encoding(text)
    if encoding not in ("utf-8", "utf-8-sig"):
        # json.loads reads UTF-16 and UTF-32 too, where a quote's or a bracket's byte may be
        # part of another character: counted on the text as UTF-8.
        try:
            text = text.decode(encoding).encode()
        except UnicodeError:
            return 0  # no JSON: json.loads says so
    if b"\\" in text:
        text = _ESCAPE.sub(b"", text)
    deepest = level = 0
    in_string = False
    for start in range(0, len(text), _DEPTH_BLOCK):
        block = np.frombuffer(text, np.uint8, min(_DEPTH_BLOCK, len(text) - start), start)
        # The count of quotes so far, mod 256 (its parity is all that counts): odd, inside a
        # string (where the block began outside one).
        inside = (np.cumsum(block == _QUOTE, dtype=np.uint8) & 1).astype(bool)
        if in_string:
            inside = ~inside
        steps = _NESTING[block]
        steps[inside] = 0
        levels = np.cumsum(steps, dtype=np.int32)
        if levels.size:
            deepest, level = max(deepest, level + int(levels.max())), level + int(levels[-1])
            in_string = bool(inside[-1])
    return deepest


def check_text_depth(raw: bytes | str, where: str, limit: int = MAX_JSON_DEPTH) -> None:
    """:func:`check_depth` of the JSON text ``raw`` (see :func:`text_depth`)."""
    text = raw.encode() if isinstance(raw, str) else bytes(raw)
    # No more opening brackets than the limit (in any encoding, a bracket is that byte): no
    # deeper, and the counting's fixed cost (about 40 us) is not paid by every small document.
    if text.count(b"[") + text.count(b"{") <= limit:
        return
    if text_depth(text) > limit:
        raise MetadataError(f"{where}: JSON nests deeper than {limit} levels")


def loads_document(raw: bytes, key: str) -> Any:
    """Decode the JSON text of the document stored at ``key``; MetadataError naming ``key``
    when it is not JSON, or nests deeper than MAX_JSON_DEPTH."""
    # Before decoding: json's decoder recurses once a level, and the text says it at once.
    check_text_depth(raw, key)
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of over 4300 digits
        raise MetadataError(f"{key}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        # json's decoder recurses once per level of nesting.
        raise MetadataError(f"{key}: JSON nests deeper than {MAX_JSON_DEPTH} levels") from exc
    return doc


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


def _refuse_keys_not_strings(value: Any, where: str) -> None:
    """JSON's object keys are strings: ``json.dumps`` writes 1, 1.5, True and None as "1",
    "1.5", "true" and "null", so ``{1: ..., "1": ...}`` became a document with one key twice
    (and the handle and the stored document disagreed)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise MetadataError(f"{where}: keys must be strings, got {key!r}")
            _refuse_keys_not_strings(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_keys_not_strings(item, f"{where}[{i}]")


def check_attributes(attributes: Any, stored: Any = None) -> None:
    """Raise MetadataError unless ``attributes`` can be written as JSON and read back from every
    document that holds them (see ``ATTRIBUTES_NESTED_BY``).

    NaN and infinite numbers are no JSON: gpuzarr writes none of its own, but keeps those of
    ``stored`` (the attributes as a document held them: zarr-python writes ``NaN`` and
    ``Infinity``, xarray's ``valid_max: inf`` among them) at the places they held them, so
    that a resize, an attribute change or a copy of such a node leaves its document no less
    readable than it was.
    """
    check_depth(attributes, "attributes", MAX_JSON_DEPTH - ATTRIBUTES_NESTED_BY)
    _refuse_keys_not_strings(attributes, "attributes")
    try:
        json.dumps(attributes, allow_nan=False)
    except (TypeError, ValueError) as exc:
        if "Out of range float" not in str(exc):
            raise MetadataError(f"attributes: values must be JSON-serialisable ({exc})") from exc
        kept = non_finite_places(stored) if stored is not None else {}
        if _KEPT.get() is not None:
            kept = {**non_finite_places(_KEPT.get()), **kept}
        new = [place for place, token in non_finite_places(attributes).items() if kept.get(place) != token]
        if new:
            where = "attributes" + "".join(f"[{key!r}]" for key in new[0])
            raise MetadataError(
                f"{where}: NaN and infinite numbers are not JSON, and gpuzarr writes none of its own "
                '(zarr-python writes them as NaN and Infinity); store them as strings, e.g. "NaN"'
            ) from exc


#: Attributes a document held, whose NaN and infinite numbers are kept by what is written in
#: :func:`keeping_attributes`'s block (``from_array`` of an array zarr-python wrote).
_KEPT: ContextVar[Any] = ContextVar("gpuzarr_kept_attributes", default=None)


@contextlib.contextmanager
def keeping_attributes(attributes: Any) -> Iterator[None]:
    """Within the block, :func:`check_attributes` keeps the NaN and infinite numbers of
    ``attributes`` (a node's, copied) where they stand, as its ``stored`` argument does."""
    token = _KEPT.set(attributes)
    try:
        yield
    finally:
        _KEPT.reset(token)


def non_finite_places(value: Any) -> dict[tuple[Any, ...], str]:
    """Where ``value`` (JSON values) holds NaN or infinite numbers: the keys and indices that
    lead to each, and the token zarr-python writes for it (``NaN``, ``Infinity``, ``-Infinity``)."""
    places: dict[tuple[Any, ...], str] = {}
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, place = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            places[place] = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
        elif isinstance(item, dict):
            stack.extend((v, (*place, k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, (*place, k)) for k, v in enumerate(item))
    return places


def document_bytes(document: dict[str, Any], attributes_member: str | None = "attributes") -> bytes:
    """A metadata document as JSON bytes (indented, as zarr-python writes them). NaN and
    infinite numbers, which :func:`check_attributes` lets through where a document held them,
    are written as zarr-python writes them in the attributes (the ``attributes_member`` of
    ``document``; None: ``document`` is attributes, ``.zattrs``) and are an error anywhere else."""
    attributes = document if attributes_member is None else document.get(attributes_member)
    if not attributes or not non_finite_places(attributes):
        return json.dumps(document, indent=2, allow_nan=False).encode()
    if attributes_member is not None:
        json.dumps({**document, attributes_member: None}, allow_nan=False)
    return json.dumps(document, indent=2, allow_nan=True).encode()
