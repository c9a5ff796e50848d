"""What an array made "like" another takes from it: shape, dtype, chunks, codecs and fill
value (zarr-python's ``_like_args``, plus the format), for :mod:`gpuzarr.creation`'s
``*_like`` functions, ``array`` and ``from_array``, and the ``*_like`` methods of groups."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .from_data import as_data, data_chunks


def _check_full_like(a: Any) -> None:
    """Raise TypeError where ``a`` has no fill value to lend ``full_like``.

    Only a Zarr array has one, and zarr-python's ``full`` needs one.
    """
    if zarr_document(a) is None:
        raise TypeError("full_like: missing the fill_value argument")


#: what each ``*_like`` takes from its source besides the layout: (its fill value, else this one)
_LIKE_FILLS: dict[str, tuple[bool, Any]] = {
    "empty": (True, None),
    "zeros": (False, 0),
    "ones": (False, 1),
    "full": (True, None),
}


def like_arguments(kind: str, a: Any, overrides: dict[str, Any], zarr_format: int | None = None) -> dict[str, Any]:
    """The arguments of :func:`gpuzarr.create` for a ``kind`` array like ``a``, ``overrides``
    (the caller's keyword arguments) applied.

    ``kind`` is "empty", "zeros", "ones" or "full" (which needs a fill value: ``a``'s, for a
    Zarr array, or one in ``overrides``; TypeError otherwise). ``chunk_shape`` in ``overrides``
    (zarr-python's other name for ``chunks``) replaces ``a``'s chunks.

    With ``zarr_format`` (a hierarchy's), a Zarr array of the other format lends its shape,
    dtype, regular chunks and fill value only: its codecs are of its format, and a hierarchy
    holds one format.
    """
    if kind == "full" and "fill_value" not in overrides:
        _check_full_like(a)
    keep_fill_value, fill_value = _LIKE_FILLS[kind]
    like = like_args(a)
    if keep_fill_value and zarr_document(a) is not None:
        like["fill_value"] = a.fill_value
    elif fill_value is not None:
        like["fill_value"] = number_fill(fill_value, overrides.get("dtype", like.get("dtype")))
    if zarr_format is not None and like.get("zarr_format", zarr_format) != zarr_format:
        like = {**across_formats(like), "dtype": as_data(a).dtype}
    if "chunk_shape" in overrides:
        like.pop("chunks", None)
    return {**like, **overrides}


def across_formats(like: dict[str, Any]) -> dict[str, Any]:
    """What of ``like`` (:func:`like_args`) an array of the other Zarr format takes: its shape,
    fill value and regular chunks; its codecs are of its format (a chain of one format has no
    form in the other in general)."""
    kept: dict[str, Any] = {key: like[key] for key in ("shape", "fill_value") if key in like}
    chunks = like.get("chunks")
    if isinstance(chunks, (tuple, list)) and all(isinstance(c, int) for c in chunks):
        kept["chunks"] = tuple(chunks)
    return kept


def number_fill(value: int, dtype: Any) -> Any:
    """The fill value ``zeros`` or ``ones`` (``value``: 0 or 1) gives ``dtype``: its digit as
    bytes for a fixed-length bytes type (``b"0"``, as zarr-python, and as text types take
    ``"0"``), else ``value`` itself."""
    try:
        kind = np.dtype(dtype).kind
    except (TypeError, ValueError):  # a Zarr type name NumPy does not know: taken as given
        return value
    return str(value).encode() if kind == "S" else value


def zarr_document(a: Any) -> dict[str, Any] | None:
    """The metadata document of a gpuzarr or zarr-python array (``metadata.to_dict()``), else None."""
    to_dict = getattr(getattr(a, "metadata", None), "to_dict", None)
    if not callable(to_dict):
        return None
    doc = to_dict()
    if not isinstance(doc, dict) or doc.get("zarr_format") not in (2, 3):
        return None
    # zarr-python gives tuples; JSON's lists are what create() takes.
    as_json: dict[str, Any] = json.loads(json.dumps(doc, default=str))
    return as_json


def like_args(a: Any) -> dict[str, Any]:
    """What an array like ``a`` inherits (zarr-python's ``_like_args``, plus the format)."""
    a = as_data(a)
    new: dict[str, Any] = {"shape": tuple(a.shape), "dtype": a.dtype}
    doc = zarr_document(a)
    if doc is None:
        chunks = data_chunks(a)
        if chunks is not None:
            new["chunks"] = chunks
        return new
    # zarr-python does not carry the format, so its zeros_like of a v2 array fails on the v2
    # compressor; carrying it makes the new array a true sibling.
    new["zarr_format"] = doc["zarr_format"]
    if doc["zarr_format"] == 2:
        if isinstance(doc["dtype"], str):
            new["dtype"] = doc["dtype"]  # keeps the byte order (">i4"), which ``a.dtype`` may not
        new.update(
            chunks=tuple(doc["chunks"]), order=doc["order"], compressor=doc["compressor"], filters=doc["filters"]
        )
        return new
    # The whole chain with the stored (outer) grid: a sharded array's shards carry over, where
    # zarr-python's inner chunks alone would make every shard one chunk.
    grid = doc["chunk_grid"]
    configuration = grid.get("configuration", {})
    if grid.get("name") == "regular":
        new["chunks"] = tuple(configuration["chunk_shape"])
    elif "chunk_shapes" in configuration:
        new["chunks"] = configuration["chunk_shapes"]
    new["codecs"] = doc["codecs"]
    return new
