"""zarr-python's ``config`` of an array (its ``ArrayConfig``, or a dict of its keys): what
gpuzarr takes of it, ``write_empty_chunks``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidArgumentError


@dataclass(frozen=True)
class ArrayConfig:
    """An array's ``config``, read as zarr-python's ``ArrayConfig`` is (``a.config.write_empty_chunks``).

    ``write_empty_chunks``: whether chunks equal to the fill value are stored; ``order``:
    always "C" (reads return C-ordered arrays).
    """

    order: str = "C"
    write_empty_chunks: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

#: The keys of zarr-python's ``ArrayConfig`` (``config=`` of ``create_array``).
ARRAY_CONFIG_KEYS = ("order", "write_empty_chunks")


def with_write_empty_chunks(config: Any, write_empty_chunks: bool | None) -> Any:
    """``config`` with zarr-python's ``write_empty_chunks`` keyword in it.

    ``zarr.create`` takes both; the two disagreeing raise InvalidArgumentError.
    """
    if write_empty_chunks is None:
        return config
    value = bool(write_empty_chunks)
    if config is None:
        return {"write_empty_chunks": value}
    if isinstance(config, dict):
        if config.get("write_empty_chunks", value) != value:
            raise InvalidArgumentError(
                f"write_empty_chunks={write_empty_chunks!r} and config {config!r}: they disagree"
            )
        return {**config, "write_empty_chunks": value}
    if write_empty_chunks_of(config) != value:
        raise InvalidArgumentError(f"write_empty_chunks={write_empty_chunks!r} and config {config!r}: they disagree")
    return config


def write_empty_chunks_of(config: Any) -> bool:
    """Whether zarr-python's ``config`` asks to store chunks equal to the fill value.

    ``config`` is an ``ArrayConfig``, a dict of its keys, or None. ``write_empty_chunks``
    (default False) says whether chunks equal to the fill value are stored; where not, a
    stored one is erased.

    Its ``order`` is the memory order of the arrays reads return, which gpuzarr keeps C:
    "F" raises rather than being ignored (a Zarr v3 array's stored order is its codecs'; a
    ``transpose`` filter or ``gpuzarr.create(order="F")`` stores chunks transposed).
    """
    if config is None:
        return False
    if isinstance(config, ArrayConfig):
        config = config.to_dict()
    if isinstance(config, dict):
        unknown = sorted(set(config) - set(ARRAY_CONFIG_KEYS))
        if unknown:
            raise InvalidArgumentError(f"config: unknown key(s) {unknown}; expected some of {list(ARRAY_CONFIG_KEYS)}")
        order, write_empty = config.get("order", "C"), config.get("write_empty_chunks", False)
    elif all(hasattr(config, key) for key in ARRAY_CONFIG_KEYS):  # zarr.core.array_spec.ArrayConfig
        order, write_empty = config.order, config.write_empty_chunks
    else:
        raise InvalidArgumentError(f"config: expected a dict or zarr-python's ArrayConfig, got {config!r}")
    if order not in (None, "C"):
        raise InvalidArgumentError(
            f"config: order {order!r}: gpuzarr returns C-ordered arrays; to store chunks in another "
            "order, give a transpose filter (or gpuzarr.create(order='F'))"
        )
    if not isinstance(write_empty, bool):
        raise InvalidArgumentError(f"config: write_empty_chunks must be True or False, got {write_empty!r}")
    return write_empty
