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

from typing import TYPE_CHECKING, Any

from .api import create, create_array, open_array
from .core.from_data import as_data, data_chunks
from .core.like import across_formats, like_args, like_arguments, number_fill, zarr_document
from .errors import InvalidArgumentError
from .metadata.json_util import keeping_attributes

if TYPE_CHECKING:
    from .core.array import Array
    from .store import StoreLike

__all__ = [
    "array",
    "from_array",
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
    return _create(shape, store, fill_value=number_fill(0, kwargs.get("dtype")), **kwargs)


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
    return _create(shape, store, fill_value=number_fill(1, kwargs.get("dtype")), **kwargs)


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
    if kwargs.get("zarr_format", 0) is None:  # zarr-python's "as the source, else the default"
        del kwargs["zarr_format"]
    defaults: dict[str, Any] = {}
    if zarr_document(data) is not None:
        defaults = {**like_args(data), "fill_value": data.fill_value}
        if kwargs.get("zarr_format", defaults["zarr_format"]) != defaults["zarr_format"]:
            defaults = across_formats(defaults)  # from_array does the same
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


#: ``from_array``'s "take it from the source" (zarr-python's "keep").
KEEP = "keep"


class _FromSource:
    def __repr__(self) -> str:
        return "<the source's>"


#: ``from_array``'s default of the arguments whose "keep" is implicit in zarr-python.
_FROM_SOURCE: Any = _FromSource()


def from_array(
    store: StoreLike = None,
    *,
    data: Any,
    write_data: bool = True,
    name: str | None = None,
    chunks: Any = KEEP,
    shards: Any = KEEP,
    filters: Any = KEEP,
    compressors: Any = KEEP,
    serializer: Any = KEEP,
    fill_value: Any = _FROM_SOURCE,
    order: str | None = None,
    zarr_format: int | None = None,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_names: Any = None,
    storage_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    config: Any = None,
    device: str = "auto",
) -> Array:
    """A new array made like ``data`` and holding its values, as zarr-python 3's ``from_array``.

    From a gpuzarr or zarr-python array, what is not given is the source's: "keep" (the default
    of ``chunks``, ``shards``, ``filters``, ``compressors`` and ``serializer``) takes it, and so
    does leaving ``fill_value``, ``order`` (v2), ``zarr_format``, ``attributes``,
    ``dimension_names`` (v3) or ``chunk_key_encoding`` out (the last only where both are of
    the same format). Codecs are kept only into the same format (a v3 chain has no v2 form in
    general): into the other they are "auto". From anything else (NumPy, CuPy, PyTorch, lists)
    "keep" means "auto" for ``chunks`` and the codecs and None for ``shards``.

    Parameters
    ----------
    store, name, storage_options, overwrite, config, device
        As :func:`gpuzarr.create_array`.
    data
        The source; with ``write_data=False`` only its shape, dtype and the above are taken.
    chunks, shards, filters, compressors, serializer, fill_value, order, zarr_format
        As :func:`gpuzarr.create_array`, or taken from the source as above.
    attributes, chunk_key_encoding, dimension_names
        The same.

    Returns
    -------
    Array
    """
    source = as_data(data)
    document = zarr_document(source)
    source_format = None if document is None else int(document["zarr_format"])
    target_format = zarr_format or source_format or 3
    same_format = source_format == target_format

    def kept(value: Any, from_source: Any, otherwise: Any) -> Any:
        if value is not KEEP and value is not _FROM_SOURCE:
            return value
        return from_source if document is not None else otherwise

    codec_kept = same_format  # a codec chain of one format has no form in the other in general
    source_chunks, source_shards = _grid_of(source, document)
    if target_format == 2 and not all(isinstance(n, int) for n in source_chunks or ()):
        source_chunks = "auto"  # a rectilinear grid has no Zarr v2 form
    options: dict[str, Any] = {
        "chunks": kept(chunks, source_chunks, data_chunks(source) or "auto"),
        "shards": kept(shards, source_shards if target_format == 3 else None, None),
        "filters": kept(filters, tuple(source.filters) if codec_kept else "auto", "auto"),
        "compressors": kept(compressors, tuple(source.compressors) if codec_kept else "auto", "auto"),
        "serializer": kept(serializer, _serializer_of(source) if codec_kept else "auto", "auto"),
        # None is zarr-python's "the source's" too (``_parse_keep_array_attr``).
        "fill_value": kept(
            _FROM_SOURCE if fill_value is None else fill_value, getattr(source, "fill_value", None), None
        ),
        "attributes": dict(source.attrs) if attributes is None and document is not None else attributes,
    }
    if target_format == 3:
        options["order"] = order  # create_array refuses any but "C"
        names = document.get("dimension_names") if document is not None and same_format else None
        options["dimension_names"] = dimension_names if dimension_names is not None else names
        if chunk_key_encoding is None and document is not None and same_format:
            chunk_key_encoding = document.get("chunk_key_encoding")
        options["chunk_key_encoding"] = chunk_key_encoding
    else:
        if dimension_names is not None:
            raise InvalidArgumentError("dimension_names: not available for zarr_format=2")
        v2_order = document.get("order", "C") if document is not None and same_format else "C"
        options["order"] = order or v2_order
        if chunk_key_encoding is None and document is not None and same_format:
            chunk_key_encoding = {"name": "v2", "separator": document.get("dimension_separator") or "."}
        options["chunk_key_encoding"] = chunk_key_encoding
    if same_format and target_format == 2 and document is not None and isinstance(document.get("dtype"), str):
        options["dtype"] = document["dtype"]  # with its byte order (">i4"), which ``source.dtype`` may drop
    # The source's own attributes keep the NaN and infinite numbers its document held (xarray's
    # ``valid_max: inf``, written by zarr-python), as copy and convert keep them.
    held = options["attributes"] if attributes is None else None
    with keeping_attributes(held):
        return create_array(
            store,
            name=name,
            data=source,
            write_data=write_data,
            zarr_format=target_format,
            storage_options=storage_options,
            overwrite=overwrite,
            config=config,
            device=device,
            **options,
        )


def _grid_of(source: Any, document: dict[str, Any] | None) -> tuple[Any, Any]:
    """(chunks, shards) of a Zarr array ``source`` as :func:`gpuzarr.create` takes them.

    A rectilinear grid of shards is given by the listed sizes in its metadata ``document``.
    """
    chunks, shards = getattr(source, "chunks", None), getattr(source, "shards", None)
    grid = (document or {}).get("chunk_grid")
    if shards is not None and isinstance(grid, dict) and grid.get("name") != "regular":
        listed = (grid.get("configuration") or {}).get("chunk_shapes")
        if listed is not None:
            shards = listed
    return chunks, shards


def _serializer_of(source: Any) -> Any:
    """A source's array -> bytes codec, "auto" where it has none (Zarr v2)."""
    serializer = getattr(source, "serializer", None)
    return "auto" if serializer is None else serializer


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
    return _like("empty", a, kwargs)


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
    return _like("zeros", a, kwargs)


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
    return _like("ones", a, kwargs)


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
    return _like("full", a, kwargs)


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
    merged = like_arguments("empty", a, kwargs)
    return open_array(merged.pop("store", None), path=path, **merged)


def _like(kind: str, a: Any, kwargs: dict[str, Any]) -> Array:
    merged = like_arguments(kind, a, kwargs)
    return create(merged.pop("store", None), **merged)
