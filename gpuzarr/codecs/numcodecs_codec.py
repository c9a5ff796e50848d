"""``numcodecs.<id>`` — bytes -> bytes through any numcodecs codec (v2 filters and compressors).

Spec: zarr-python's ``numcodecs.*`` v3 codec names; v2 ``compressor`` / ``filters`` entries with
ids other than blosc, zstd and gzip normalise to this. Configuration example::

    {"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}}
    {"name": "numcodecs.zlib", "configuration": {"level": 5}}

Filters that change the element type (``fixedscaleoffset`` with ``astype``, ``quantize``) work
because numcodecs filters interpret their input with their own configured dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MetadataError, UnknownCodecError
from ..store.base import Buffer
from .base import BytesToBytesCodec, as_uint8

PREFIX = "numcodecs."


@dataclass(frozen=True, eq=False)
class NumcodecsCodec(BytesToBytesCodec):
    name = "numcodecs"
    codec_id: str
    config: dict[str, Any]
    _impl: Any = field(default=None, repr=False)

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
        return self._impl.encode(as_uint8(data))  # type: ignore[no-any-return]
