"""``FieldArray``: one field of a structured zarr2 array, as TensorStore presents it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import BoundsCheckError, InvalidSelectionError, MetadataError
from ..futures import Future, submit
from ..plan.selection import expand_ellipsis
from .array import broadcast_value, written_value

if TYPE_CHECKING:
    from .array import Array

__all__ = ["FieldArray", "select_field"]


def select_field(array: Array, field_name: str) -> FieldArray:
    """One field of a structured array, checked to exist."""
    fields = array.dtype.fields
    if fields is None:
        raise MetadataError(
            f"field: {field_name!r} given, but the array's data type {array.dtype} has no fields"
        )
    if field_name not in fields:
        raise MetadataError(f"field: expected one of {list(fields)}, got {field_name!r}")
    return FieldArray(array, field_name)


class FieldArray:
    """One field of a structured zarr2 array, as TensorStore presents it: a numeric array whose
    shape is the array's shape followed by the field's subarray shape.

    Reading reads whole records and takes the field. Writing reads the records, replaces the
    field and writes the records back (read-modify-write of every touched record; concurrent
    writers of other fields may be lost). The subarray (trailing) dimensions take integers and
    slices only.
    """

    def __init__(self, array: Array, field_name: str) -> None:
        fields = array.dtype.fields
        assert fields is not None
        self.array = array
        self.field = field_name
        field_dtype = fields[field_name][0]
        self._subshape: tuple[int, ...] = tuple(field_dtype.shape)
        self._dtype = field_dtype.base

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape followed by the field's subarray shape."""
        return tuple(self.array.shape) + self._subshape

    @property
    def ndim(self) -> int:
        """Number of dimensions, the subarray's included."""
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The field's base (scalar) data type."""
        return self._dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """The array's chunk shape followed by the field's subarray shape."""
        return tuple(self.array.chunks) + self._subshape

    @property
    def fill_value(self) -> Any:
        """The field's part of the array's fill value."""
        return np.asarray(self.array.metadata.fill_value)[self.field][()]

    def __repr__(self) -> str:
        return f"<gpuzarr.FieldArray field={self.field!r} of {self.array!r}>"

    def _split(self, selection: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        sel = expand_ellipsis(selection, self.ndim)
        outer, inner = sel[: self.array.ndim], sel[self.array.ndim :]
        for s in inner:
            if not isinstance(s, (slice, int, np.integer)):
                raise InvalidSelectionError(
                    f"field {self.field!r}: subarray dimensions take integers and slices, got {s!r}"
                )
        for s in outer:
            if not isinstance(s, (slice, int, np.integer, list, tuple, np.ndarray)) or (
                isinstance(s, np.ndarray) and s.dtype.kind not in "biu"
            ):
                raise InvalidSelectionError(
                    f"field {self.field!r}: expected integers, slices, integer arrays or masks, got {s!r}"
                )
        return outer, inner

    def __getitem__(self, selection: Any) -> Any:
        outer, inner = self._split(selection)
        if _has_index_array(outer):
            cover, local = _covering(outer, self.array.shape, self.field)
            values = np.asarray(self.array.oindex[cover])[self.field]
            return _taken(values, (*local, *inner), self.field)
        records = self.array[outer]
        values = np.asarray(records)[self.field]
        if not inner:
            return values
        try:
            return values[(Ellipsis, *inner)]
        except IndexError as exc:  # the field's own (subarray) axes, which NumPy checks
            raise BoundsCheckError(f"field {self.field!r}: {exc}") from None

    def read(self, selection: Any = Ellipsis) -> Any:
        """Read ``selection`` of the field (NumPy array)."""
        return self[selection]

    def read_async(self, selection: Any = Ellipsis) -> Future[Any]:
        """:meth:`read`, started and returned at once as a :class:`gpuzarr.futures.Future`
        (see ``Array.read_async``); the selection's axes are checked here."""
        self._split(selection)
        return submit(self.read, selection)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        data: np.ndarray[Any, Any] = self[...]
        return data if dtype is None else data.astype(dtype, copy=False)

    def __setitem__(self, selection: Any, value: Any) -> None:
        # The records are read and written back with one shape: an append between the two put
        # the last record's other fields into the appended one (see core/shape_lock.py).
        with self.array._shape_lock.shared():
            self._set(selection, value)

    def _set(self, selection: Any, value: Any) -> None:
        outer, inner = self._split(selection)
        arr = written_value(value, self._dtype, f"field {self.field!r} of array {self.array.path or '/'!r}")
        if _has_index_array(outer):
            cover, local = _covering(outer, self.array.shape, self.field)
            covered = np.array(self.array.oindex[cover], copy=True)
            target = (*local, *inner)
            shape = _taken(covered[self.field], target, self.field).shape
            covered[self.field][target] = broadcast_value(arr, shape)
            self.array.oindex[cover] = covered
            return
        records = np.array(self.array[outer], copy=True)
        view = records[self.field]
        where = (Ellipsis, *inner) if inner else Ellipsis
        view[where] = broadcast_value(arr, view[where].shape)
        self.array[outer] = records

    def spec(self) -> dict[str, Any]:
        """The TensorStore spec of this field (the array's spec with ``field``)."""
        return {**self.array.spec(), "field": self.field}


def _has_index_array(outer: tuple[Any, ...]) -> bool:
    return any(not isinstance(s, (slice, int, np.integer)) for s in outer)


def _taken(values: np.ndarray[Any, Any], selection: tuple[Any, ...], field: str) -> np.ndarray[Any, Any]:
    """``values[selection]``; index arrays that do not broadcast together are an
    InvalidSelectionError, as for the array itself."""
    try:
        return values[selection]  # type: ignore[no-any-return]
    except IndexError as exc:
        raise InvalidSelectionError(f"field {field!r}: {exc}") from exc


def _covering(
    outer: tuple[Any, ...], shape: tuple[int, ...], field: str
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """For array axes indexed with index arrays (or masks): the outer selection of the
    records that cover them, and the selection of the field in those records that stands for
    ``outer``, index for index (an integer for an integer, an array of the same shape for an
    array). The whole selection then goes to NumPy at once, which orders the axes of several
    advanced indices (the array's and the subarray's integers) as it does for the field
    itself; the array axes were indexed first, and a slice between an index array and a
    subarray integer came back with its axes in another order."""
    cover: list[Any] = []
    local: list[Any] = []
    for axis, (s, size) in enumerate(zip(outer, shape, strict=True)):
        if isinstance(s, slice):
            cover.append(s)
            local.append(slice(None))
        elif isinstance(s, (int, np.integer)):
            cover.append([s])
            local.append(0)
        else:
            index = np.asarray(s)
            if index.dtype == bool:
                cover.append(index)
                local.append(np.arange(int(index.sum())))
            else:
                if index.dtype.kind not in "iu":
                    raise InvalidSelectionError(f"field {field!r}: index arrays must hold integers, got {index.dtype}")
                if index.size and not (-size <= int(index.min()) and int(index.max()) < size):
                    raise BoundsCheckError(
                        f"field {field!r}: an index of axis {axis} is out of range [-{size}, {size})"
                    )
                # One entry per record: -1 and size-1 are one record, which NumPy writes last value first.
                values, positions = np.unique(np.where(index < 0, index + size, index), return_inverse=True)
                cover.append(values)
                local.append(positions.reshape(index.shape))
    return tuple(cover), tuple(local)
