"""Opening and creating arrays from TensorStore-style JSON specs.

``open_spec`` follows TensorStore's ``zarr3``/``zarr2`` drivers:

* open an existing array, checking the spec's ``metadata`` and ``schema``/``dtype``/``rank``
  constraints against what is stored (a mismatch raises MetadataError naming the field);
* create one: the metadata is built from the ``metadata`` constraints and the schema (shape from
  ``metadata.shape`` or ``schema.domain``; chunk shapes from the metadata or, failing that,
  chosen from ``schema.chunk_layout`` as TensorStore chooses them; a ``sharding_indexed`` codec
  when the read and write chunks differ; a ``transpose`` codec for ``inner_order``; TensorStore's
  default codecs: ``bytes`` alone for zarr3, blosc for zarr2). Codecs fixed in ``metadata`` are
  taken as given, as TensorStore takes them: without sharding they have one chunk shape, which
  the read and write constraints both choose, and a hard ``inner_order`` they do not have is
  refused (so that the same spec opens the array it made);
* TensorStore's own ``spec()`` of an array reopens it: codec constraints compare after the
  stored codecs' defaults, and an identity ``transform``'s ``input_labels`` must be the array's
  dimension names (a view under other names is refused, not made);
* ``delete_existing``, ``open`` + ``create``, ``assume_metadata`` (metadata taken from the spec,
  never read nor written; resizing then raises) and ``assume_cached_metadata``;
* ``field`` opens one field of a zarr2 structured array (:class:`~gpuzarr.core.field_array.FieldArray`);
* ``fill_missing_data_reads`` and ``store_data_equal_to_fill_value``;
* a zarr2 array whose ``.zarray`` names no ``dimension_separator`` takes the spec's
  (``key_encoding`` or ``metadata.dimension_separator``); the ``zarr2`` driver reads the
  ``.zarray`` of an array that also has a ``zarr.json`` (migrated in place).

Different on purpose: a zarr2 array of fixed-length bytes (``|S4``) or raw bytes (``|V2``)
opens as zarr-python opens it, one element per item of the stored shape with that NumPy dtype,
where TensorStore makes the bytes a last dimension of ``char`` or ``byte`` (so its ``rank`` is
one more, and its ``spec()``'s ``"dtype": "char"`` is refused here as a dtype gpuzarr has not).

The parsing, the rules, the new metadata and ``Array.spec()``'s JSON are pure and live beside
this module (``spec``, ``constraints``, ``create``); this module does the I/O, and is the only
module of the package that touches a Store or builds an Array.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..consolidated import record_metadata_write
from ..core.array import Array
from ..core.field_array import select_field
from ..core.group import refuse_unwritable_codecs
from ..errors import ArrayNotFoundError, ContainsNodeError, MetadataError, ReadOnlyError
from ..hierarchy import NodeInfo, array_metadata, node_exists, read_node, write_node
from ..metadata.v3 import ArrayMetadata
from ..store import LocalStore, MemoryStore, make_store, refuse_options, zip_store
from ..store.base import Store
from .constraints import check_metadata_constraints, check_schema_constraints, stored_schema
from .create import build_metadata
from .kvstore import KvStoreSpec, join_path
from .schema import check_view_bounds, check_view_labels
from .spec import TensorStoreSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..metadata.v2 import ArrayMetadataV2


def open_spec(
    spec: dict[str, Any],
    *,
    mode: str | None = None,
    device: str = "auto",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Open or create the array a TensorStore-style JSON spec describes.

    Parameters
    ----------
    spec
        ``{"driver": "zarr3" | "zarr2" | "zarr", "kvstore": {...} | "file://..." , ...}``.
        ``kvstore`` may also be a gpuzarr Store object.
    mode
        zarr-python's mode ("r", "r+", "a", "w", "w-"), merged with the spec's ``open``,
        ``create`` and ``delete_existing``; a contradiction raises MetadataError.
    device
        "auto", "gpu" or "cpu".
    storage_options
        For an ``s3``, ``gcs`` or ``http`` kvstore: obstore options added to (and overriding)
        the spec's (:mod:`gpuzarr.store.object_options`).
    **kwargs
        Spec members (``create=True``, ``metadata={...}``) or ``tensorstore.open``'s options
        (``shape``, ``domain``, ``dtype``, ``fill_value``, ``chunk_layout``, ``dimension_units``,
        ``codec``).

    Returns
    -------
    Array, or FieldArray when ``field`` is given.
    """
    store_obj: Store | None = None
    if isinstance(spec, dict) and isinstance(spec.get("kvstore"), Store):
        store_obj = spec["kvstore"]
        spec = {**spec, "kvstore": {"driver": "memory"}}
    parsed = TensorStoreSpec.from_json(spec, mode=mode, **kwargs)
    store, path = _make_store(parsed.kvstore, parsed.read_only, store_obj, storage_options)
    return open_parsed(parsed, store, path, device)


def _make_store(
    kvstore: KvStoreSpec, read_only: bool, store_obj: Store | None, storage_options: dict[str, Any] | None = None
) -> tuple[Store, str]:
    if store_obj is not None:
        s, _ = make_store(store_obj, read_only=read_only, storage_options=storage_options)
        return s, kvstore.path
    if kvstore.driver in ("s3", "gcs", "http"):
        return make_store(kvstore.to_json(), read_only=read_only, storage_options=storage_options)
    # as for a path: options given where none are taken are refused, not dropped
    refuse_options(storage_options, f"a {kvstore.driver!r} kvstore")
    if kvstore.url is not None:
        s, base = make_store(kvstore.url, read_only=read_only)
        return s, join_path(base, kvstore.path)
    if kvstore.driver == "zip":
        assert kvstore.base is not None
        return zip_store(kvstore.base.path, read_only), kvstore.path
    if kvstore.driver == "file":
        return LocalStore(kvstore.path, read_only=read_only), ""
    return MemoryStore(read_only=read_only), kvstore.path


def open_parsed(spec: TensorStoreSpec, store: Store, path: str, device: str = "auto") -> Any:
    """Open or create the array ``spec`` describes at ``path`` of ``store``."""
    options: dict[str, Any] = {
        "fill_missing_data_reads": spec.fill_missing_data_reads,
        "store_data_equal_to_fill_value": spec.store_data_equal_to_fill_value,
    }
    metadata: ArrayMetadata | ArrayMetadataV2
    if spec.assume_metadata or spec.assume_cached_metadata:
        metadata = build_metadata(spec)
        check_view_labels(spec.schema, _dimension_names(metadata))
        array = Array(store, path, metadata, device=device, metadata_writable=not spec.assume_metadata, **options)
        result = _select_field(array, spec)
        check_view_bounds(spec.schema, result.shape)
        return result
    exists = spec.open and node_exists(store, path)
    if exists:
        info = read_node(store, path, allow_implicit=False, v2_first=spec.zarr_format == 2)
        if info is None or info.node_type != "array":
            raise ArrayNotFoundError(f"{path or '/'!r} in {store!r} is a group, not an array")
        if info.zarr_format != spec.zarr_format:
            raise MetadataError(
                f"driver: {spec.driver!r} expects Zarr v{spec.zarr_format}, found a Zarr v{info.zarr_format} "
                f"array at {path or '/'!r}"
            )
        metadata = array_metadata(_with_spec_separator(info, spec), path)
        array = Array(store, path, metadata, device=device, **options)
        check_metadata_constraints(spec, metadata.to_json())
        result = _select_field(array, spec)
        check_schema_constraints(spec.schema, stored_schema(metadata, spec.field))
        check_view_labels(spec.schema, _dimension_names(metadata))
        check_view_bounds(spec.schema, result.shape)
        return result
    if not spec.create:
        raise ArrayNotFoundError(f"no Zarr v{spec.zarr_format} array at {path or '/'!r} in {store!r}")
    if store.read_only:
        raise ReadOnlyError(f"cannot create an array in read-only {store!r}")
    if not spec.delete_existing and node_exists(store, path):
        raise ContainsNodeError(
            f"a node already exists at {path or '/'!r} in {store!r} (set delete_existing or open)"
        )
    metadata = build_metadata(spec)
    check_view_labels(spec.schema, _dimension_names(metadata))
    array = Array(store, path, metadata, device=device, **options)  # resolves codecs before any write
    refuse_unwritable_codecs(metadata)
    result = _select_field(array, spec)
    check_view_bounds(spec.schema, result.shape)
    # The rules of every new node (an array among the ancestors is refused; what was there goes
    # with its data), without the parent groups TensorStore does not write either.
    documents = metadata.documents()
    written = write_node(
        store, path, documents, overwrite=spec.delete_existing, zarr_format=spec.zarr_format, parents=False
    )
    record_metadata_write(store, path, new_node=True, replaced=written.replaced)
    return result


def _with_spec_separator(info: NodeInfo, spec: TensorStoreSpec) -> NodeInfo:
    """``info``, with the spec's chunk key separator (``key_encoding`` or
    ``metadata.dimension_separator``) where a v2 array's ``.zarray`` names none: as in
    TensorStore's ``zarr2`` driver, the stored document decides where it says, and the spec
    where it is silent. Arrays written before ``dimension_separator`` existed (zarr-python's
    ``NestedDirectoryStore`` keeps chunks at ``0/0``) are read so; without it, they read as
    the fill value."""
    separator = spec.metadata.get("dimension_separator") if spec.zarr_format == 2 else None
    if separator is None or info.zarr_format != 2 or "dimension_separator" in info.document:
        return info
    return dataclasses.replace(info, document={**info.document, "dimension_separator": separator})


def _dimension_names(metadata: ArrayMetadata | ArrayMetadataV2) -> Sequence[str | None] | None:
    return metadata.dimension_names if isinstance(metadata, ArrayMetadata) else None


# -- fields of structured zarr2 arrays --------------------------------------------------------------


def _select_field(array: Array, spec: TensorStoreSpec) -> Any:
    return array if spec.field is None else select_field(array, spec.field)
