"""The exceptions gpuzarr raises.

Every error subclasses :class:`GpuZarrError` *and* the builtin it resembles, so that plain
``except ValueError`` / ``except FileNotFoundError`` clauses keep working. Messages name the key
or metadata field and say what was expected and what was found.
"""

from __future__ import annotations

import re
from typing import Any


class GpuZarrError(Exception):
    """Base class of every gpuzarr error."""


class MetadataError(GpuZarrError, ValueError):
    """Array or group metadata is malformed, unsupported or inconsistent."""


class UnknownCodecError(MetadataError):
    """A codec name (v3) or id (v2) is not known to gpuzarr."""


class NodeNotFoundError(GpuZarrError, FileNotFoundError):
    """No array or group exists at the given path."""


class ArrayNotFoundError(NodeNotFoundError):
    """No array exists at the given path."""


class GroupNotFoundError(NodeNotFoundError):
    """No group exists at the given path."""


class ContainsNodeError(GpuZarrError, FileExistsError):
    """A node already exists where one was to be created."""


class IncompatibleNodeError(ContainsNodeError, TypeError):
    """A node exists where one was required (``require_array``, ``require_group``), but not of
    the kind, shape or data type asked for; a ``TypeError`` too, as zarr-python raises."""


class ReadOnlyError(GpuZarrError, PermissionError):
    """A write was attempted on a store or array opened read-only."""


_KEY_AND_REASON = r"(.+?): (.*)"
_MISSING_TEXT = "chunk is missing (fill_missing_data_reads is false)"
_MISSING = rf"(.+): {re.escape(_MISSING_TEXT)}"


def _last_line_of(text: str, name: str, fields: str) -> re.Match[str] | None:
    """The fields of the last line of a traceback in ``text`` that shows the error ``name``
    (``gpuzarr.errors.CorruptChunkError: c/1/0: ...``), as PyTorch's DataLoader re-raises a
    worker's error with the worker's traceback for its message."""
    matches = list(re.finditer(rf"^(?:[\w.]+\.)?{name}: {fields}$", text, re.MULTILINE))
    return matches[-1] if matches else None


class CorruptChunkError(GpuZarrError, ValueError):
    """Stored chunk or shard bytes cannot be decoded into what the metadata promises."""

    def __init__(self, key: str, reason: str | None = None) -> None:
        if reason is None:
            # One argument is a whole message: PyTorch's DataLoader raises a worker's error
            # again as ``type(error)(text)``, and would fall back to RuntimeError otherwise.
            # The text holds the worker's traceback, whose last line is this error's: the key
            # and the reason are taken back from it (a key holding ": " is cut at it).
            text = key
            found = _last_line_of(text, "CorruptChunkError", _KEY_AND_REASON)
            key, reason = found.groups() if found else ("", text)
            super().__init__(text)
        else:
            super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason

    def __reduce__(self) -> tuple[type[CorruptChunkError], tuple[str, str], dict[str, Any]]:
        # Raised in worker processes too (loader and DataLoader workers, Dask): rebuilt from its
        # parts, with its attributes and notes (``add_note``) as they were.
        return type(self), (self.key, self.reason), self.__dict__


class ChunkNotFoundError(GpuZarrError, FileNotFoundError):
    """A chunk is missing and the array was opened with ``fill_missing_data_reads=False``."""

    def __init__(self, key: str) -> None:
        found = _last_line_of(key, "ChunkNotFoundError", _MISSING) if "\n" in key else None
        if found:  # a worker's traceback (see CorruptChunkError)
            super().__init__(key)
            self.key = found.group(1)
            return
        super().__init__(f"{key}: {_MISSING_TEXT}")
        self.key = key

    def __reduce__(self) -> tuple[type[ChunkNotFoundError], tuple[str], dict[str, Any]]:
        return type(self), (self.key,), self.__dict__


class InvalidArgumentError(GpuZarrError, ValueError):
    """An argument of a call is outside what it accepts: a mode, a shape, a batch of
    selections, a value that does not broadcast, an ``out`` buffer of the wrong shape."""


class UnknownSettingError(InvalidArgumentError, KeyError):
    """A ``gpuzarr.config`` setting that does not exist (also a KeyError, as a missing name of
    a mapping is)."""


class UnalignedChunksError(InvalidArgumentError):
    """Two blocks of a parallel write (Dask blocks) would write to one stored chunk, or one
    shard: writers that may run on several hosts could lose each other's data. The message names
    the axis, the blocks and the chunk or shard."""


class InvalidKeyError(GpuZarrError, ValueError):
    """A store key is not a valid relative path (contains '..', a leading '/' or a backslash)."""


class DeviceError(GpuZarrError, RuntimeError):
    """The requested device cannot be used."""


class PassEndedError(GpuZarrError, RuntimeError):
    """An iteration over a :class:`~gpuzarr.loader.CropLoader` was asked for a batch after a new
    pass over the same loader (``iter``, ``set_epoch``, ``load_state_dict``) had ended it
    before its last batch. A loader runs one pass at a time."""


class WorkerProcessError(GpuZarrError, RuntimeError):
    """A worker process of a :class:`~gpuzarr.loader.CropLoader` exited while it had batches to
    read, or could not start; the message names the worker, its exit code and the batch."""


class BoundsCheckError(GpuZarrError, IndexError):
    """A selection lies outside the array."""


class UnwritableValueError(InvalidArgumentError, TypeError):
    """A value to write that NumPy cannot convert to the array's data type (a string or None
    into integers, NaN or an out-of-range integer into int32, a lone surrogate into text); the
    message names the array. A ValueError and a TypeError: NumPy raises either, by the value."""


class InvalidSelectionError(GpuZarrError, IndexError):
    """A selection gpuzarr cannot take: a float or string index or slice bound, more indices
    than axes, index arrays of floats or that do not broadcast, ``np.newaxis``. (Out-of-range
    indices raise BoundsCheckError; a slice step of zero, InvalidArgumentError.)"""


class SymlinkEscapeError(GpuZarrError, PermissionError):
    """A key of a :class:`~gpuzarr.store.LocalStore` leads, through a symbolic link, outside the
    store's root; refused unless the store was made with ``follow_symlinks=True``."""

    def __init__(self, key: str, target: str | None = None) -> None:
        if target is None:  # a whole message (see CorruptChunkError)
            super().__init__(key)
            self.key, self.target = "", ""
            return
        super().__init__(
            f"{key}: a symbolic link leads outside the store root, to {target!r} "
            "(LocalStore(..., follow_symlinks=True) follows it)"
        )
        self.key = key
        self.target = target

    def __reduce__(self) -> tuple[type[SymlinkEscapeError], tuple[str, str], dict[str, Any]]:
        return type(self), (self.key, self.target), self.__dict__


class _StoreFailure(GpuZarrError):
    """What store errors share: the store's URL, the key (when there is one) and the cause."""

    def __init__(self, url: str, key: str | None = None, reason: str | None = None) -> None:
        if reason is None:  # a whole message (see CorruptChunkError)
            url, key, reason = "", None, url
        super().__init__(self._text(url, key, reason))
        self.url = url
        self.key = key
        self.reason = reason

    @staticmethod
    def _text(url: str, key: str | None, reason: str) -> str:
        if not url:
            return reason
        return f"{url}: {key}: {reason}" if key is not None else f"{url}: {reason}"

    def __str__(self) -> str:
        # Not OSError's "[Errno n] ...", which it prints once ``errno`` is set (a file system's
        # failure passes its errno on, for code that tests it: ENOSPC, EACCES, ...).
        return self._text(self.url, self.key, self.reason)

    def __reduce__(self) -> tuple[type[_StoreFailure], tuple[str, str | None, str], dict[str, Any]]:
        state = dict(self.__dict__)
        if isinstance(self, OSError) and self.errno is not None:  # not kept in __dict__
            state.update(errno=self.errno, strerror=self.strerror, filename=self.filename)
        return type(self), (self.url, self.key, self.reason), state


class StoreError(_StoreFailure, OSError):
    """A store failed to read, write or list for a reason other than a missing key (a missing
    key reads as None), after its retries: a server error, a timeout, a dropped connection, a
    truncated body, a file that is not what the store expects. The message names the store's
    URL, the key (when there is one) and the cause; a read that fails this way is never filled
    in with the fill value."""


class StorePermissionError(_StoreFailure, PermissionError):
    """The store refused a request for lack of credentials or permission (HTTP 401 or 403, a
    file system's permission denied). The message names the store's URL and the key."""


class UnsupportedOperationError(GpuZarrError, NotImplementedError):
    """A store cannot do what was asked by its nature (its capability flag says so): listing an
    HTTP server, erasing a member of a zip archive opened for reading."""
