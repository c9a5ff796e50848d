"""The store interface: a small synchronous key -> bytes map with byte-range reads.

Keys are '/'-separated relative paths. A missing key reads as ``None`` (never an exception), so
that missing chunks are cheap to detect. Every store passes tests/store/conformance.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidKeyError, MetadataError, ReadOnlyError
from .paths import path_problem

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

Buffer = Any  # bytes, bytearray, memoryview or a C-contiguous NumPy array


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``length`` bytes from ``offset``; ``length=None`` reads to the end.

    A negative ``offset`` with no length is a suffix request: the last ``-offset`` bytes.
    """

    offset: int
    length: int | None = None

    def __post_init__(self) -> None:
        if self.length is not None and (self.length < 0 or self.offset < 0):
            raise ValueError(
                f"byte range: expected offset >= 0 and length >= 0 (or a suffix with no length), "
                f"got offset {self.offset}, length {self.length}"
            )

    @classmethod
    def suffix(cls, nbytes: int) -> ByteRange:
        """The last ``nbytes`` bytes of a value."""
        if nbytes < 0:
            raise ValueError(f"byte range: a suffix needs nbytes >= 0, got {nbytes}")
        # offset -0 would be 0, which reads everything: the empty suffix is an empty range.
        return cls(-nbytes, None) if nbytes else cls(0, 0)

    def resolve(self, size: int) -> tuple[int, int]:
        """``(start, stop)`` within an object of ``size`` bytes (clamped to it)."""
        if self.offset < 0:
            return max(size + self.offset, 0), size
        stop = size if self.length is None else min(self.offset + self.length, size)
        return min(self.offset, size), stop


def validate_key(key: str) -> str:
    """Refuse keys that could escape the store's root or mean different things on other OSes."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"store keys must be strings, got {type(key).__name__}")
    if key == "" or key.endswith("/"):
        raise InvalidKeyError(f"invalid store key {key!r}: a key must be non-empty and not end in '/'")
    if key.startswith("/") or "\\" in key:
        raise InvalidKeyError(f"invalid store key {key!r}: no leading '/' or backslash allowed")
    parts = key.split("/")
    if any(p in ("..", ".") for p in parts) or "" in parts[:-1]:
        raise InvalidKeyError(f"invalid store key {key!r}: '.', '..' and empty segments are refused")
    return key


def validate_path(path: str, field: str = "path") -> str:
    """``path``, a node path relative to a store's root, without its leading and trailing '/'.

    Raises
    ------
    InvalidKeyError
        Naming ``field`` and the path, when ``path`` is not a string or has a '.', '..' or empty
        component (see :func:`path_problem`).
    """
    if not isinstance(path, str):
        raise InvalidKeyError(f"{field}: expected a string, got {type(path).__name__}")
    problem = path_problem(path)
    if problem is not None:
        raise InvalidKeyError(f"{field}: invalid path {path!r}: {problem}")
    return path.strip("/")


def validate_prefix(prefix: str) -> str:
    """Refuse prefixes that are not a valid key plus at most one trailing '/' ("" is the root)."""
    if prefix == "":
        return prefix
    validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


class Store(ABC):
    """Base class of all stores."""

    #: True when get() with a ByteRange costs only the bytes asked for.
    supports_partial_reads: bool = True

    def __init__(self, read_only: bool = False) -> None:
        self.read_only = read_only

    # -- reading -------------------------------------------------------------------------------

    @abstractmethod
    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The value at ``key`` (or the requested part of it), or None if absent."""

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        """Several parts of one value; None if the key is absent."""
        out = []
        for r in ranges:
            value = self.get(key, r)
            if value is None:
                return None
            out.append(value)
        return out

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """Read ``length`` bytes from ``start`` (to the end when None) of ``key``.

        ``buffer_for(n)`` supplies a writable uint8 buffer of ``n`` bytes to read into, so that
        hot loops can reuse memory. Returns (a view of the bytes read, the value's total size),
        or None when the key is absent. Stores holding values in memory may return a view of
        their own memory instead of filling the buffer.
        """
        value = self.get(key)
        if value is None:
            return None
        view = memoryview(value).cast("B")
        stop = len(view) if length is None else min(start + length, len(view))
        part = view[min(start, len(view)) : stop]
        target = memoryview(buffer_for(len(part))).cast("B")
        target[:] = part
        return target, len(view)

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value."""
        return self.get(key, ByteRange(0, 0)) is not None

    @abstractmethod
    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix``."""

    def list_dir(self, prefix: str) -> tuple[list[str], list[str]]:
        """Keys directly under ``prefix`` and the child prefixes (ending in '/'), both full."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        keys, dirs = set(), set()
        for key in self.list_prefix(prefix):
            rest = key[len(prefix) :]
            if "/" in rest:
                dirs.add(prefix + rest.split("/", 1)[0] + "/")
            else:
                keys.add(key)
        return sorted(keys), sorted(dirs)

    # -- writing -------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{self!r} is read-only")

    @abstractmethod
    def set(self, key: str, value: Buffer) -> None:
        """Store ``value`` at ``key`` atomically (readers see the old or the new value)."""

    @abstractmethod
    def erase(self, key: str) -> None:
        """Remove ``key``; removing an absent key is not an error."""

    def erase_prefix(self, prefix: str) -> None:
        """Remove every key starting with ``prefix``."""
        self._check_writable()
        for key in list(self.list_prefix(prefix)):
            self.erase(key)

    def kvstore_json(self) -> dict[str, Any] | str:
        """The TensorStore kvstore (JSON object or URL) that reopens this store.

        Used by :meth:`gpuzarr.Array.spec`. Stores without a TensorStore equivalent raise
        MetadataError.
        """
        raise MetadataError(f"spec: no TensorStore kvstore for {self!r}")

    def close(self) -> None:
        """Release any handles the store holds."""
