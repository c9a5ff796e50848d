"""zarr-python's array constructors: zeros, ones, full, empty, array and the ``*_like`` family.

Each is :func:`gpuzarr.create` (or :func:`gpuzarr.open_array` for :func:`open_like`) with some
arguments filled in, with zarr-python 3's names and meanings: keyword arguments pass through to
``create`` (``store`` included; none is a new in-memory store), and ``dtype`` defaults to
float64. The ``*_like`` functions take the shape, dtype and chunks of ``a`` (a gpuzarr or
zarr-python array, or anything with a ``shape`` and ``dtype``); from a Zarr array they also take
its format, its codecs (v3: the whole chain, so a sharded array's shard layout carries over; v2:
compressor, filters and order) and, for ``empty_like``, ``full_like`` and ``open_like``, its fill
value. Keyword arguments override all of these.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .api import create, open_array
from .core.from_data import as_data, data_chunks

if TYPE_CHECKING:
    from .core.array import Array
    from .store import StoreLike

__all__ = [
    "array",
    "empty",
    "empty_like",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "open_like",
    "zeros",
    "zeros_like",
]


def _create(shape: Any, store: StoreLike, **kwargs: Any) -> Array:
    return create(store, shape=shape, **kwargs)


def zeros(shape: Any, *, store: StoreLike = None, **kwargs: Any) -> Array:
    """Create an array whose unwritten elements read as 0 (``fill_value=0``).

    Parameters
    ----------
    shape
        The array's shape (an integer for one axis).
    store
        Where to create it (see :func:`gpuzarr.create`); None is a new in-memory store.
    **kwargs
        Passed to :func:`gpuzarr.create` (``dtype`` defaults to float64).

    Returns
    -------
    Array
    """
    return _create(shape, store, fill_value=0, **kwargs)


def ones(shape: Any, *, store: StoreLike = None, **kwargs: Any) -> Array:
    """Create an array whose unwritten elements read as 1 (``fill_value=1``).

    Parameters
    ----------
    shape
        The array's shape (an integer for one axis).
    store
        Where to create it (see :func:`gpuzarr.create`); None is a new in-memory store.
    **kwargs
        Passed to :func:`gpuzarr.create` (``dtype`` defaults to float64).

    Returns
    -------
    Array
    """
    return _create(shape, store, fill_value=1, **kwargs)


def full(shape: Any, fill_value: Any, *, store: StoreLike = None, **kwargs: Any) -> Array:
    """Create an array whose unwritten elements read as ``fill_value``.

    Parameters
    ----------
    shape
        The array's shape (an integer for one axis).
    fill_value
        The value of every element until it is written.
    store
        Where to create it (see :func:`gpuzarr.create`); None is a new in-memory store.
    **kwargs
        Passed to :func:`gpuzarr.create` (``dtype`` defaults to float64).

    Returns
    -------
    Array
    """
    return _create(shape, store, fill_value=fill_value, **kwargs)


def empty(shape: Any, *, store: StoreLike = None, **kwargs: Any) -> Array:
    """Create an array without writing anything.

    As in zarr-python, nothing is promised about the contents; in gpuzarr unwritten elements
    read as the fill value (by default the type's zero).

    Parameters
    ----------
    shape
        The array's shape (an integer for one axis).
    store
        Where to create it (see :func:`gpuzarr.create`); None is a new in-memory store.
    **kwargs
        Passed to :func:`gpuzarr.create` (``dtype`` defaults to float64).

    Returns
    -------
    Array
    """
    return _create(shape, store, **kwargs)


def array(data: Any, **kwargs: Any) -> Array:
    """Create an array holding ``data``.

    Parameters
    ----------
    data
        Anything with a shape and dtype (NumPy, CuPy, PyTorch, a gpuzarr or zarr-python array)
        or a nested list or scalar. A gpuzarr or zarr-python array also gives its chunks, codecs,
        format and fill value (as ``zarr.array`` of a Zarr array keeps them); any other object
        with a ``chunks`` tuple gives its chunks.
    **kwargs
        Passed to :func:`gpuzarr.create` (``store``, ``dtype``, ``chunks``, ...), overriding
        what ``data`` gives.

    Returns
    -------
    Array
    """
    data = as_data(data)
    defaults: dict[str, Any] = {}
    if _zarr_document(data) is not None:
        defaults = {**_like_args(data), "fill_value": data.fill_value}
        defaults.pop("shape", None)
        defaults.pop("dtype", None)
    else:
        chunks = data_chunks(data)
        if chunks is not None:
            defaults["chunks"] = chunks
    kwargs = {**defaults, **kwargs}
    if kwargs.get("chunks") is None:
        kwargs.pop("chunks", None)
    return create(kwargs.pop("store", None), data=data, **kwargs)


def empty_like(a: Any, **kwargs: Any) -> Array:
    """Create an array like ``a`` (shape, dtype, chunks, codecs, fill value), writing nothing.

    Parameters
    ----------
    a
        A gpuzarr or zarr-python array, or anything with a ``shape`` and ``dtype``.
    **kwargs
        Passed to :func:`gpuzarr.create`, overriding what ``a`` gives.

    Returns
    -------
    Array
    """
    return _like(a, kwargs, keep_fill_value=True, fill_value=None)


def zeros_like(a: Any, **kwargs: Any) -> Array:
    """Create an array like ``a`` (shape, dtype, chunks, codecs) whose elements read as 0.

    Parameters
    ----------
    a
        A gpuzarr or zarr-python array, or anything with a ``shape`` and ``dtype``.
    **kwargs
        Passed to :func:`gpuzarr.create`, overriding what ``a`` gives.

    Returns
    -------
    Array
    """
    return _like(a, kwargs, keep_fill_value=False, fill_value=0)


def ones_like(a: Any, **kwargs: Any) -> Array:
    """Create an array like ``a`` (shape, dtype, chunks, codecs) whose elements read as 1.

    Parameters
    ----------
    a
        A gpuzarr or zarr-python array, or anything with a ``shape`` and ``dtype``.
    **kwargs
        Passed to :func:`gpuzarr.create`, overriding what ``a`` gives.

    Returns
    -------
    Array
    """
    return _like(a, kwargs, keep_fill_value=False, fill_value=1)


def full_like(a: Any, **kwargs: Any) -> Array:
    """Create an array like ``a`` whose elements read as ``fill_value``.

    ``fill_value`` is a keyword argument; from a Zarr array it defaults to that array's.

    Parameters
    ----------
    a
        A gpuzarr or zarr-python array, or anything with a ``shape`` and ``dtype``.
    **kwargs
        Passed to :func:`gpuzarr.create`, overriding what ``a`` gives.

    Returns
    -------
    Array

    Raises
    ------
    TypeError
        ``a`` is not a Zarr array and no ``fill_value`` is given.
    """
    if "fill_value" not in kwargs and _zarr_document(a) is None:
        # zarr-python's full() needs one; only a Zarr array has a fill value to lend.
        raise TypeError("full_like: missing the fill_value argument")
    return _like(a, kwargs, keep_fill_value=True, fill_value=None)


def open_like(a: Any, path: str, **kwargs: Any) -> Array:
    """Open the array at ``path``, creating it like ``a`` when it does not exist.

    Parameters
    ----------
    a
        A gpuzarr or zarr-python array, or anything with a ``shape`` and ``dtype``.
    path
        The array's path below ``store``.
    **kwargs
        Passed to :func:`gpuzarr.open_array` (``store``, ``mode``, and creation arguments,
        which override what ``a`` gives).

    Returns
    -------
    Array
    """
    like = _like_args(a)
    if _zarr_document(a) is not None:
        like["fill_value"] = a.fill_value
    merged = {**like, **kwargs}
    return open_array(merged.pop("store", None), path=path, **merged)


def _like(a: Any, kwargs: dict[str, Any], *, keep_fill_value: bool, fill_value: Any) -> Array:
    like = _like_args(a)
    if keep_fill_value and _zarr_document(a) is not None:
        like["fill_value"] = a.fill_value
    elif fill_value is not None:
        like["fill_value"] = fill_value
    merged = {**like, **kwargs}
    return create(merged.pop("store", None), **merged)


def _zarr_document(a: Any) -> dict[str, Any] | None:
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


def _like_args(a: Any) -> dict[str, Any]:
    """What an array like ``a`` inherits (zarr-python's ``_like_args``, plus the format)."""
    a = as_data(a)
    new: dict[str, Any] = {"shape": tuple(a.shape), "dtype": a.dtype}
    doc = _zarr_document(a)
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
