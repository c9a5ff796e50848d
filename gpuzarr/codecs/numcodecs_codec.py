"""``numcodecs.<id>`` — bytes -> bytes through any numcodecs codec (v2 filters and compressors).

Spec: zarr-python's ``numcodecs.*`` v3 codec names; v2 ``compressor`` / ``filters`` entries with
ids other than blosc, zstd and gzip normalise to this. Configuration example::

    {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}
    {"name": "numcodecs.zlib", "configuration": {"level": 5}}

Filters that change the element type (``fixedscaleoffset`` with ``astype``, ``quantize``) work
because numcodecs filters interpret their input with their own configured dtype. Codecs without
one (``bitround``) check the type of what they are given, so the chunk's bytes are handed to them
as elements of the array's data type, as zarr-python does; the output of an earlier numcodecs
filter is passed on with its own type.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError, UnknownCodecError
from .base import BytesToBytesCodec, ChunkSpec, as_uint8

if TYPE_CHECKING:
    from ..store.base import Buffer

PREFIX = "numcodecs."


@dataclass(frozen=True, eq=False)
class NumcodecsCodec(BytesToBytesCodec):
    name = "numcodecs"
    codec_id: str
    config: dict[str, Any]
    _impl: Any = field(default=None, repr=False)
    #: The array's data type (set by ``resolve``): how raw chunk bytes are typed for ``encode``.
    _dtype: np.dtype[Any] | None = field(default=None, repr=False)

    @classmethod
    def from_id(cls, codec_id: str, config: dict[str, Any]) -> NumcodecsCodec:
        import numcodecs

        try:
            impl = numcodecs.get_codec({"id": codec_id, **config})
        except (ValueError, KeyError) as exc:
            if "not available" in str(exc) or isinstance(exc, KeyError):
                raise UnknownCodecError(f"unknown numcodecs codec id {codec_id!r}") from exc
            raise MetadataError(f"numcodecs codec {codec_id!r}: invalid configuration ({exc})") from exc
        except TypeError as exc:
            raise MetadataError(f"numcodecs codec {codec_id!r}: invalid configuration ({exc})") from exc
        return cls(codec_id, dict(config), impl)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NumcodecsCodec:  # pragma: no cover - via from_id
        raise MetadataError("numcodecs codecs are named 'numcodecs.<id>'")

    def resolve(self, spec: ChunkSpec) -> NumcodecsCodec:
        return replace(self, _dtype=spec.dtype)

    def to_json(self) -> dict[str, Any]:
        return {"name": PREFIX + self.codec_id, "configuration": dict(self.config)}

    def configuration(self) -> dict[str, Any]:
        return dict(self.config)

    def decode(self, data: Buffer, out: np.ndarray[Any, Any] | None = None) -> Buffer:
        result = self._impl.decode(as_uint8(data))
        arr = np.asarray(result)
        if arr.dtype == object:
            raise ValueError(f"numcodecs.{self.codec_id} decoded to objects, which gpuzarr does not support")
        return np.ascontiguousarray(arr)

    def encode(self, data: Buffer) -> Buffer:
        if isinstance(data, np.ndarray) and data.dtype != np.uint8:
            return self._impl.encode(data.reshape(-1))
        raw = as_uint8(data)
        dt = self._dtype
        if dt is not None and dt.fields is None and dt.kind in "biufc" and raw.size % dt.itemsize == 0:
            return self._impl.encode(raw.view(dt))
        return self._impl.encode(raw)
