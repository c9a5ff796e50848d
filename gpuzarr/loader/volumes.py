"""The loader's input, checked once: volumes (Arrays) per field, their shapes, dtypes and device.

A single Array or a list of Arrays is one unnamed field; a dict maps field names to an Array or
a list of Arrays, paired by position: volume i of every field is cropped at the same origin, so
paired volumes must have one shape. Within a field every volume has one dtype and one rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.select import bits_carrier, resolve_device_for
from ..core.array import Array
from ..errors import DeviceError, InvalidArgumentError, UnsupportedOperationError

#: the field name of an Array or list of Arrays given without names
UNNAMED = ""


@dataclass(frozen=True)
class Volumes:
    """The checked input of a loader."""

    #: field name -> one Array per volume, all on ``device``
    arrays: dict[str, list[Array]]
    #: whether the user gave a dict (batches then carry a dict of arrays)
    keyed: bool
    #: each volume's shape (shared by its paired fields)
    shapes: list[tuple[int, ...]]
    #: field name -> the dtype read and held on the device: the arrays', or on a GPU the
    #: integer type carrying the bits of a type CuPy cannot hold (``bits_carrier``)
    dtypes: dict[str, np.dtype[Any]]
    #: the resolved device of every array: "cpu" or "cuda:N"
    device: str
    #: field name -> the arrays' own dtype, which batches are handed over as (None: ``dtypes``)
    given_dtypes: dict[str, np.dtype[Any]] | None = None

    @property
    def batch_dtypes(self) -> dict[str, np.dtype[Any]]:
        """Field name -> the dtype of the batches handed over (a ``bfloat16`` field read as
        its bits on a GPU is handed over as ``bfloat16``)."""
        return self.given_dtypes if self.given_dtypes is not None else self.dtypes

    @property
    def fields(self) -> list[str]:
        return list(self.arrays)

    def check_unchanged(self, field: str, volume: int) -> None:
        """Refuse to read a volume whose shape changed since the loader was made (a ``resize``
        or ``append`` through its Array): the loader's crops were drawn inside the old shape."""
        array = self.arrays[field][volume]
        # A GPU twin of a CPU-opened array keeps the metadata it was made with: the user's
        # handle, which a resize changes, is the one to ask.
        now = tuple(getattr(array, "_twin_of", array).shape)
        if now != self.shapes[volume]:
            raise InvalidArgumentError(
                f"{self.describe(field, volume)} was resized from {self.shapes[volume]} to {now} after the loader "
                "was made, whose crops were drawn inside the old shape: make a new CropLoader"
            )

    def describe(self, field: str, volume: int) -> str:
        """How errors name a volume: its index, field and path."""
        array = self.arrays[field][volume]
        where = f"{field!r} " if self.keyed else ""
        path = f" (path {array.path!r})" if array.path else ""
        return f"{where}volume {volume}{path}"


def base_array(array: Any) -> Any:
    """The Array behind a volume: a FieldArray's array, else the volume itself."""
    return getattr(array, "array", array)


def data_generation(array: Any) -> int:
    """How many changes were made through a volume's Array (``Array.data_generation``)."""
    return int(getattr(base_array(array), "data_generation", 0))


def _as_list(value: Any, what: str) -> list[Array]:
    items = [value] if isinstance(value, Array) else value
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidArgumentError(f"{what}: expected a gpuzarr.Array or a list of them, got {type(value).__name__}")
    items = list(items)
    if not items:
        raise InvalidArgumentError(f"{what}: no volumes given")
    for i, item in enumerate(items):
        if not isinstance(item, Array):
            raise InvalidArgumentError(f"{what}: volume {i} is a {type(item).__name__}, not a gpuzarr.Array")
    return items


def on_device(array: Array, device: str, label: str = "the volume") -> Array:
    """``array``, or a twin of it opened on ``device`` whose ``data_generation`` follows the
    writes made through ``array`` (``Array._twin_on``): the loader's caches drop what such a
    write changed, as they do for the arrays they read themselves. On a GPU, an array of a type
    CuPy cannot hold is read as its bits (``bits_carrier``); DeviceError names ``label`` where it
    cannot be."""
    bits = bits_carrier(array.dtype) if device != "cpu" else None
    if bits is None and array.device == device:
        return array
    try:
        return array._twin_on(device, bits)
    except UnsupportedOperationError as exc:
        raise DeviceError(f"arrays: {label} cannot be read on {device}: {exc}") from None


def check_volumes(arrays: Any, crop_shape: Any, device: str) -> tuple[Volumes, tuple[int, ...]]:
    """The checked volumes and crop shape; InvalidArgumentError names what does not fit."""
    keyed = isinstance(arrays, Mapping)
    if keyed:
        if not arrays:
            raise InvalidArgumentError("arrays: the dict of fields is empty")
        # Field names are strings (a batch's data is keyed by them): two keys with one string
        # (``{1: image, "1": label}``) became one field, and one of them was lost silently.
        names = [str(name) for name in arrays]
        clash = next((name for name in names if names.count(name) > 1), None)
        if clash is not None:
            given = [repr(k) for k in arrays if str(k) == clash]
            raise InvalidArgumentError(f"arrays: the keys {', '.join(given)} name one field {clash!r}")
        fields = {str(name): _as_list(value, f"arrays[{name!r}]") for name, value in arrays.items()}
    else:
        fields = {UNNAMED: _as_list(arrays, "arrays")}
    counts = {name: len(v) for name, v in fields.items()}
    if len(set(counts.values())) != 1:
        raise InvalidArgumentError(f"arrays: every field needs the same number of volumes, got {counts}")
    first = next(iter(fields.values()))
    ndim = first[0].ndim
    shape = _crop_shape(crop_shape, ndim)
    dtypes: dict[str, np.dtype[Any]] = {}
    for name, items in fields.items():
        for i, array in enumerate(items):
            label = f"{name!r} volume {i}" if keyed else f"volume {i}"
            if array.ndim != ndim:
                raise InvalidArgumentError(
                    f"arrays: {label} has {array.ndim} dimensions, volume 0 has {ndim}; one loader reads volumes "
                    "of one rank"
                )
            dtype = dtypes.setdefault(name, array.dtype)
            if array.dtype != dtype:
                raise InvalidArgumentError(
                    f"arrays: {label} has dtype {array.dtype}, volume 0 has {dtype}; one field holds one dtype "
                    "(cast the volumes, or give them as separate fields of a dict)"
                )
            if array.shape != first[i].shape:
                raise InvalidArgumentError(
                    f"arrays: {label} has shape {array.shape}, its paired volume has {first[i].shape}; paired "
                    "volumes are cropped at the same origins and need one shape"
                )
            if any(c > n for c, n in zip(shape, array.shape, strict=True)):
                raise InvalidArgumentError(f"crop_shape {shape} does not fit inside {label} of shape {array.shape}")
    resolved = _resolve_device(fields, device, keyed)
    arrays_on = {
        name: [on_device(a, resolved, f"{name!r} volume {i}" if keyed else f"volume {i}") for i, a in enumerate(items)]
        for name, items in fields.items()
    }
    read = {name: items[0].dtype for name, items in arrays_on.items()}
    volumes = Volumes(arrays_on, keyed, [a.shape for a in first], read, resolved, None if read == dtypes else dtypes)
    return volumes, shape


def _crop_shape(crop_shape: Any, ndim: int) -> tuple[int, ...]:
    try:
        entries = tuple(crop_shape)
    except TypeError as exc:
        raise InvalidArgumentError(f"crop_shape: expected a tuple of integers, got {crop_shape!r}") from exc
    if any(isinstance(c, bool) or not isinstance(c, int | np.integer) for c in entries):
        # int() would cut 5.9 down to 5 without a word.
        raise InvalidArgumentError(f"crop_shape: expected a tuple of integers, got {crop_shape!r}")
    shape = tuple(int(c) for c in entries)
    if len(shape) != ndim or any(c < 1 for c in shape):
        raise InvalidArgumentError(f"crop_shape: expected {ndim} positive integers (one per axis), got {crop_shape!r}")
    return shape


def _resolve_device(fields: dict[str, list[Array]], device: str, keyed: bool) -> str:
    """ "auto": the device the arrays are on (one for all); else the device asked for."""
    if device == "auto":
        devices = {a.device for items in fields.values() for a in items}
        if len(devices) != 1:
            raise InvalidArgumentError(
                f"device='auto': the arrays are on several devices {sorted(devices)}; pass device= explicitly"
            )
        return devices.pop()
    # A type CuPy cannot hold is read as its bits on a GPU (``on_device``).
    resolved = {resolve_device_for(device, bits_carrier(items[0].dtype) or items[0].dtype) for items in fields.values()}
    if len(resolved) != 1:  # pragma: no cover - one device string resolves to one device
        raise InvalidArgumentError(f"device={device!r} resolves to several devices {sorted(resolved)}")
    return resolved.pop()
