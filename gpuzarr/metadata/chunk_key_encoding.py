"""Chunk key encodings: chunk grid coordinates -> store keys (Zarr v3 core §chunk key encoding)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MetadataError
from .json_util import expect_dict, split_name_configuration

if TYPE_CHECKING:
    from .json_types import NamedConfigJSON


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """``default`` ("c/1/2", "c.1.2") or ``v2`` ("1.2", "1/2") encoding with a separator."""

    name: str = "default"
    separator: str = "/"

    def __post_init__(self) -> None:
        if self.name not in ("default", "v2"):
            raise MetadataError(
                f"chunk_key_encoding.name: expected 'default' or 'v2', got {self.name!r}"
            )
        if self.separator not in ("/", "."):
            raise MetadataError(
                "chunk_key_encoding.configuration.separator: expected '/' or '.', "
                f"got {self.separator!r}"
            )

    @classmethod
    def from_json(cls, value: Any) -> ChunkKeyEncoding:
        name, config = split_name_configuration(value, "chunk_key_encoding")
        config = expect_dict(config, "chunk_key_encoding.configuration")
        extra = set(config) - {"separator"}
        if extra:
            # A misspelt separator would name other keys than the stored chunks, which would
            # then read as the fill value (zarr-python and TensorStore refuse it too).
            raise MetadataError(f"chunk_key_encoding.configuration: unexpected members {sorted(extra)}")
        default_sep = "/" if name == "default" else "."
        return cls(name, config.get("separator", default_sep))

    def to_json(self) -> NamedConfigJSON:
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def encode(self, coords: tuple[int, ...]) -> str:
        if self.name == "default":
            return self.separator.join(("c", *map(str, coords)))
        if not coords:
            return "0"
        return self.separator.join(map(str, coords))
