"""A zip archive as a store, on the standard library's :mod:`zipfile`; interoperable with
zarr-python's ``zarr.storage.ZipStore`` and TensorStore's ``zip`` kvstore.

Reads go around :class:`zipfile.ZipExtFile`: the member's data offset comes from its local
header, and bytes are read with ``os.pread`` from the archive's file, so that threads read at
once and a byte range of a stored (uncompressed) member reads only those bytes. Deflated
members are inflated as a stream, keeping only the range asked for. Sizes come from the
archive's central directory, which is untrusted: a member must lie inside the archive, a
deflated one may not declare more than deflate's largest ratio of its compressed size, and
inflating stops one byte past the declared size (a zip bomb is a CorruptChunkError naming the
member, after at most that many bytes).

Zip archives are append-only. Writing a key again appends a new member, and readers of this
store see the newest; erasing a key hides it. zarr-python leaves such superseded members in
the archive (zipfile warns "Duplicate name"), and TensorStore refuses an archive with
duplicate names, so :meth:`ZipStore.close` rewrites an archive that has any: its live members
are copied to a temporary file beside it, which then replaces it. The central directory is
written on close (or when the store is garbage collected, or at interpreter exit).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
import zipfile
import zlib
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    ContainsNodeError,
    CorruptChunkError,
    InvalidArgumentError,
    InvalidKeyError,
    NodeNotFoundError,
    StoreError,
)
from .base import Buffer, ByteRange, Snapshot, Store, os_errors, os_failure, validate_key, validate_prefix
from .locks import process_locks

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator, Sequence

ZipMode = Literal["r", "w", "a"]

#: deflate's largest compression ratio is 1032:1 (RFC 1951: 258 bytes from a 2-bit code);
#: a member declaring more is corrupt or hostile.
MAX_DEFLATE_RATIO = 1032
_LOCAL_HEADER_SIZE = 30
_LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"
_INFLATE_STEP = 1 << 20


class _Archive:
    """The open archive behind a :class:`ZipStore`: what its finalizer closes, so that the
    finalizer does not keep the store alive.

    Reads take no lock while they read (``os.pread``); ``readers`` counts them, so that the file
    is not closed (and its descriptor reused) under them.
    """

    def __init__(self, path: str, compression: int) -> None:
        self.path = path
        self.compression = compression
        self.cond = threading.Condition(threading.RLock())
        self.zf: zipfile.ZipFile | None = None
        #: the live member of each key (the newest of duplicate names; erased keys removed)
        self.members: dict[str, zipfile.ZipInfo] = {}
        #: whether the file holds members that are superseded or erased
        self.stale = False
        self.closed = False
        self.readers = 0

    def open(self, zip_mode: Literal["r", "w", "a"]) -> None:
        """Open the file (under ``cond``), after the readers of the previous one are done."""
        if zip_mode == "a" and _exists(self.path) and not _is_zip_archive(self.path):
            # zipfile would append an archive to the end of any file.
            raise StoreError(str(self.path), None, "not a zip archive")
        while self.readers:
            self.cond.wait()
        if self.zf is not None:
            self.zf.close()
            self.zf = None
        try:
            zf = zipfile.ZipFile(self.path, zip_mode, compression=self.compression, allowZip64=True)
        except zipfile.BadZipFile as exc:
            raise StoreError(str(self.path), None, f"not a zip archive ({exc})") from None
        except OSError as exc:
            raise os_failure(self.path, None, "open", exc) from exc
        members: dict[str, zipfile.ZipInfo] = {}
        stale = False
        for info in zf.infolist():
            if info.filename.endswith("/"):
                continue  # directory entries, as `zip -r` writes them
            try:
                validate_key(info.filename)
            except InvalidKeyError:
                zf.close()
                raise InvalidKeyError(
                    f"{self.path}: member {info.filename!r} is not a valid key "
                    "('.', '..', empty components, a leading '/' and backslashes are refused)"
                ) from None
            stale = stale or info.filename in members
            members[info.filename] = info  # the last of duplicate names wins, as in zipfile
        self.zf, self.members, self.stale = zf, members, stale

    def writer(self) -> zipfile.ZipFile:
        """The archive opened for writing (under ``cond``)."""
        self.check_open()
        if self.zf is None or self.zf.mode == "r":
            self.open("a")
        assert self.zf is not None
        return self.zf

    def check_open(self) -> None:
        if self.closed:
            raise StoreError(str(self.path), None, "the zip store is closed")

    def close(self) -> None:
        with self.cond:
            if self.closed:
                return
            self.closed = True
            while self.readers:
                self.cond.wait()
            zf, self.zf = self.zf, None
            if zf is None:
                return
            compact = self.stale and zf.mode != "r"
            with os_errors(self.path, None, "close"):
                zf.close()
                if compact:
                    self.compact()

    def compact(self) -> None:
        """Replace the file by an archive of the live members only (in their order)."""
        temp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        live = sorted(self.members.values(), key=lambda info: info.header_offset)
        try:
            with zipfile.ZipFile(self.path, "r") as src, zipfile.ZipFile(temp, "w", allowZip64=True) as dst:
                assert src.fp is not None
                for info in live:
                    # Checked as reads check it: a hostile member's declared size is not copied.
                    data_offset(self.path, info.filename, info, src.fp.fileno())
                    copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                    copy.compress_type = info.compress_type
                    copy.external_attr = info.external_attr
                    copy.file_size = info.file_size  # zipfile decides on zip64 from it
                    with src.open(info) as member, dst.open(copy, "w") as out:
                        while block := member.read(_INFLATE_STEP):
                            out.write(block)
            os.replace(temp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    @contextlib.contextmanager
    def reading(self, key: str) -> Iterator[tuple[zipfile.ZipInfo, int, int] | None]:
        """The live member at ``key``, its data's offset and the file's descriptor, valid
        while the context lasts; None when absent."""
        with self.cond:
            self.check_open()
            info = self.members.get(key)
            if info is None:
                yield None
                return
            fd = self._acquire()
        try:
            yield info, data_offset(self.path, key, info, fd), fd
        finally:
            self._release()

    @contextlib.contextmanager
    def reading_member(self, key: str, info: zipfile.ZipInfo) -> Iterator[tuple[int, int]]:
        """:meth:`reading` of a member known already (a snapshot's): its offset and the fd."""
        with self.cond:
            self.check_open()
            fd = self._acquire()
        try:
            yield data_offset(self.path, key, info, fd), fd
        finally:
            self._release()

    def _acquire(self) -> int:
        assert self.zf is not None and self.zf.fp is not None
        if self.zf.mode != "r":
            self.zf.fp.flush()  # members written by this store may sit in zipfile's buffer
        self.readers += 1
        return self.zf.fp.fileno()

    def _release(self) -> None:
        with self.cond:
            self.readers -= 1
            if not self.readers:
                self.cond.notify_all()


def _exists(path: str) -> bool:
    """Whether there is a file at ``path``; where the file system does not say (permission
    denied on the way), its refusal as the store's error, not "no archive there"."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise os_failure(path, None, "open", exc) from exc
    return True


def _is_zip_archive(path: str) -> bool:
    """``zipfile.is_zipfile``, but a file that cannot be read raises (as the store's error)
    rather than passing for one that is not an archive."""
    try:
        with open(path, "rb") as f:
            return zipfile.is_zipfile(f)
    except OSError as exc:
        raise os_failure(path, None, "open", exc) from exc


def data_offset(path: str, key: str, info: zipfile.ZipInfo, fd: int) -> int:
    """Where the member's data starts in the archive, checked against the archive.

    Raises CorruptChunkError naming the member when its local header is missing, it lies past
    the archive's end, its declared sizes do not fit its method, or it is encrypted or
    compressed with a method other than stored and deflated.
    """
    header = os.pread(fd, _LOCAL_HEADER_SIZE, info.header_offset)
    if len(header) != _LOCAL_HEADER_SIZE or header[:4] != _LOCAL_HEADER_SIGNATURE:
        raise corrupt(path, key, f"no local file header at offset {info.header_offset}")
    if info.flag_bits & 0x1:
        raise corrupt(path, key, "the member is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise corrupt(path, key, f"compression method {info.compress_type} is not read (stored and deflated are)")
    name_length = int.from_bytes(header[26:28], "little")
    extra_length = int.from_bytes(header[28:30], "little")
    start = info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length
    size = os.fstat(fd).st_size
    if start + info.compress_size > size:
        raise corrupt(path, key, f"{info.compress_size} bytes from offset {start} lie past the archive's end ({size})")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise corrupt(path, key, f"a stored member of {info.compress_size} bytes declares {info.file_size} bytes")
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > info.compress_size * MAX_DEFLATE_RATIO:
        raise corrupt(
            path,
            key,
            f"{info.compress_size} deflated bytes declare {info.file_size} bytes, more than deflate's "
            f"largest ratio ({MAX_DEFLATE_RATIO}:1)",
        )
    return start


def corrupt(path: str, key: str, reason: str) -> CorruptChunkError:
    """The error of a member that cannot be read as its archive describes it."""
    return CorruptChunkError(key, f"zip archive {path}: {reason}")


def read_member(path: str, key: str, info: zipfile.ZipInfo, offset: int, fd: int, start: int, stop: int) -> bytes:
    """Bytes ``start:stop`` of a member (clamped to its size), whose data is at ``offset``."""
    if stop <= start:
        return b""
    if info.compress_type == zipfile.ZIP_DEFLATED:
        return _inflate(path, key, info, offset, fd, start, stop)
    data = os.pread(fd, stop - start, offset + start)
    if len(data) != stop - start:
        raise corrupt(path, key, "the archive ended inside the member")
    if start == 0 and stop == info.file_size and zlib.crc32(data) != info.CRC:
        raise corrupt(path, key, "CRC-32 mismatch")
    return data


def _inflate(path: str, key: str, info: zipfile.ZipInfo, offset: int, fd: int, start: int, stop: int) -> bytes:
    """Bytes ``start:stop`` of a deflated member, inflated as a stream from its start; never
    more than the declared size plus one byte is produced, and only the range is kept."""
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    kept = bytearray()
    produced = read = crc = 0
    whole = start == 0 and stop == info.file_size
    while not inflate.eof:
        if inflate.unconsumed_tail:
            block = inflate.unconsumed_tail
        elif read < info.compress_size:
            block = os.pread(fd, min(_INFLATE_STEP, info.compress_size - read), offset + read)
            if not block:
                raise corrupt(path, key, "the archive ended inside the member")
            read += len(block)
        else:
            break
        try:
            out = inflate.decompress(block, min(info.file_size + 1 - produced, _INFLATE_STEP))
        except zlib.error as exc:
            raise corrupt(path, key, f"deflate stream: {exc}") from None
        if produced + len(out) > info.file_size:
            raise corrupt(path, key, f"inflates to more than its declared {info.file_size} bytes")
        if whole:
            crc = zlib.crc32(out, crc)
        lo, hi = max(start - produced, 0), min(stop - produced, len(out))
        if lo < hi:
            kept += out[lo:hi]
        produced += len(out)
        if produced >= stop and not whole:
            return bytes(kept)
    if produced != info.file_size:
        raise corrupt(path, key, f"inflates to {produced} bytes, declared {info.file_size}")
    if crc != info.CRC:
        raise corrupt(path, key, "CRC-32 mismatch")
    return bytes(kept)


class ZipStore(Store):
    """The members of a zip archive as keys.

    Parameters
    ----------
    path
        The archive's file.
    mode
        ``"r"`` reads an existing archive; ``"w"`` creates a new one (replacing a file there);
        ``"a"`` reads an existing archive and appends to it, creating it on the first write if
        it is missing (the file is opened for writing only then).
    compression
        How members are written: ``zipfile.ZIP_STORED`` (the default, as in zarr-python: Zarr
        chunks are compressed by their codecs, and stored members can be read in part) or
        ``zipfile.ZIP_DEFLATED``.

    Raises
    ------
    NodeNotFoundError
        Mode "r" and no file at ``path``.
    InvalidKeyError
        A member name that is not a valid key ('..', an absolute path, a backslash): the
        archive is refused, never read outside its keys.
    StoreError
        ``path`` is not a zip archive.
    """

    supports_partial_reads = True
    locks_across_threads = True
    #: get_into asks for its buffer from the member's declared size, before it inflates
    reads_sizes_first = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: ZipMode | Literal["x"] = "r",
        compression: int = zipfile.ZIP_STORED,
        *,
        read_only: bool | None = None,
        allowZip64: bool = True,
    ) -> None:
        # zarr-python's keywords: ``read_only`` (True: mode "r"), mode "x" (a new archive; it
        # must not exist) and ``allowZip64`` (ZIP64 records are written where needed: only True).
        if read_only is not None:
            if read_only and mode not in ("r",):
                raise InvalidArgumentError(f"ZipStore: read_only=True opens with mode 'r', not {mode!r}")
            if not read_only and mode == "r":
                mode = "a"
        if not allowZip64:
            raise InvalidArgumentError("ZipStore: allowZip64=False is not supported (ZIP64 records go where needed)")
        if mode == "x":
            if _exists(os.fspath(path)):
                raise ContainsNodeError(f"ZipStore: mode 'x' makes a new archive, and {os.fspath(path)!r} exists")
            mode = "w"
        if mode not in ("r", "w", "a"):
            raise InvalidArgumentError(f"ZipStore: mode must be 'r', 'w', 'a' or 'x', got {mode!r}")
        if compression not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise InvalidArgumentError(
                f"ZipStore: compression must be zipfile.ZIP_STORED or ZIP_DEFLATED, got {compression!r}"
            )
        super().__init__(read_only=mode == "r")
        self.path = os.path.abspath(os.fspath(path))
        self.mode: ZipMode = mode
        self.compression = compression
        self._archive = _Archive(self.path, compression)
        with self._archive.cond:
            if mode == "w":
                self._archive.open("w")
            elif _exists(self.path):
                self._archive.open("r")
            elif mode == "r":
                raise NodeNotFoundError(f"{self.path}: no zip archive there")
        # The central directory must be written even when the caller forgets close().
        weakref.finalize(self, self._archive.close)

    def close(self) -> None:
        """Write the central directory (rewriting the archive if members were superseded or
        erased) and close the file. Further use raises StoreError."""
        self._archive.close()

    def __enter__(self) -> ZipStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ZipStore({self.path!r}, mode={self.mode!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Another process reopens the archive for reading: it cannot share this one's writer.
        # An archive this store has not written to is whole on disk, so a read-only copy reads
        # the same members (dask.distributed pickles to_dask's tasks, also for workers in this
        # process, and a store opened with the default mode "a" could not be read there).
        if not self.read_only and not self._whole_on_disk():
            raise InvalidArgumentError(
                f"{self!r}: a zip store written to cannot be pickled (its archive is whole only once it is "
                "closed); close it and open it with mode 'r', or use threads instead of processes"
            )
        return {"path": self.path, "compression": self.compression}

    def _whole_on_disk(self) -> bool:
        """Opened with mode "a" on an existing archive, and not written to (yet)."""
        archive = self._archive
        with archive.cond:
            unwritten = archive.zf is not None and archive.zf.mode == "r"
            return self.mode == "a" and not archive.closed and unwritten

    def __setstate__(self, state: dict[str, Any]) -> None:
        ZipStore.__init__(self, state["path"], "r", state["compression"])

    def kvstore_json(self) -> dict[str, Any] | str:
        """TensorStore's zip kvstore over the archive's file (TensorStore reads it only)."""
        return {"driver": "zip", "base": {"driver": "file", "path": self.path}}

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The member at ``key`` (or part of it), None when absent."""
        with os_errors(self.path, key, "read"), self._archive.reading(validate_key(key)) as found:
            if found is None:
                return None
            info, offset, fd = found
            start, stop = (0, info.file_size) if byte_range is None else byte_range.resolve(info.file_size)
            return read_member(self.path, key, info, offset, fd, start, stop)

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        """Several parts of one member, read from one version of it."""
        with os_errors(self.path, key, "read"), self._archive.reading(validate_key(key)) as found:
            if found is None:
                return None
            info, offset, fd = found
            return [read_member(self.path, key, info, offset, fd, *r.resolve(info.file_size)) for r in ranges]

    def get_into(
        self, key: str, buffer_for: Callable[[int], Any], start: int = 0, length: int | None = None
    ) -> tuple[memoryview, int] | None:
        """Read part of a member into ``buffer_for(n)``; a stored member is read straight in."""
        with os_errors(self.path, key, "read"), self._archive.reading(validate_key(key)) as found:
            if found is None:
                return None
            info, offset, fd = found
            begin, stop = ByteRange(start, length).resolve(info.file_size)
            target = memoryview(buffer_for(stop - begin)).cast("B")
            partial = (begin, stop) != (0, info.file_size)
            if info.compress_type == zipfile.ZIP_STORED and partial and stop > begin:
                if os.preadv(fd, [target], offset + begin) != stop - begin:
                    raise corrupt(self.path, key, "the archive ended inside the member")
            else:
                target[:] = read_member(self.path, key, info, offset, fd, begin, stop)
            return target, info.file_size

    def exists(self, key: str) -> bool:
        """Whether the archive has a (live) member ``key``."""
        validate_key(key)
        with self._archive.cond:
            self._archive.check_open()
            return key in self._archive.members

    @contextlib.contextmanager
    def snapshot(self, key: str) -> Iterator[Snapshot]:
        """The member as it is now: members are never changed in place, so reads through the
        snapshot see this version even when the key is written again meanwhile."""
        validate_key(key)
        with self._archive.cond:
            self._archive.check_open()
            info = self._archive.members.get(key)
        yield _MemberSnapshot(self, key, info)

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """The live members' names starting with ``prefix``, sorted."""
        validate_prefix(prefix)
        with self._archive.cond:
            self._archive.check_open()
            names = list(self._archive.members)
        return iter(sorted(name for name in names if name.startswith(prefix)))

    # -- writing ---------------------------------------------------------------------------------

    def set(self, key: str, value: Buffer) -> None:
        """Append ``value`` as the member ``key`` (superseding an earlier one)."""
        self._check_writable()
        validate_key(key)
        data = memoryview(value).cast("B")
        archive = self._archive
        with archive.cond, os_errors(self.path, key, "write"):
            zf = archive.writer()
            info = zipfile.ZipInfo(key, date_time=time.localtime(time.time())[:6])
            info.compress_type = self.compression
            info.external_attr = 0o644 << 16  # rw-r--r--, as zarr-python writes members
            # zipfile warns of a duplicate name it knows: superseding is this store's design,
            # and close() drops the old member.
            zf.NameToInfo.pop(key, None)
            zf.writestr(info, data)
            archive.stale = archive.stale or key in archive.members
            archive.members[key] = info

    def erase(self, key: str) -> None:
        """Hide the member ``key``; the archive drops it when it is rewritten on close."""
        self._check_writable()
        validate_key(key)
        archive = self._archive
        with archive.cond, os_errors(self.path, key, "erase"):
            if key not in archive.members:
                archive.check_open()
                return
            archive.writer()  # the rewrite on close needs the archive opened for writing
            del archive.members[key]
            archive.stale = True

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """A thread lock of ``key`` in this archive (a zip archive has one writer: no process
        lock)."""
        self._check_writable()
        with process_locks.hold(("zip", self.path, validate_key(key))):
            yield


class _MemberSnapshot(Snapshot):
    """One member of a zip archive, as it was when the snapshot was taken."""

    def __init__(self, store: ZipStore, key: str, info: zipfile.ZipInfo | None) -> None:
        super().__init__(key)
        self.store = store
        self.info = info

    @property
    def version(self) -> Hashable | None:
        """The member's place in the archive: a new version is a new member."""
        return None if self.info is None else self.info.header_offset

    def get(self, key: str, byte_range: ByteRange | None = None) -> Buffer | None:
        """The member's bytes (or part of them), None when it was absent."""
        got = self.get_ranges(key, [ByteRange(0) if byte_range is None else byte_range])
        return None if got is None else got[0]

    def get_ranges(self, key: str, ranges: Sequence[ByteRange]) -> list[Buffer] | None:
        """Several parts of the member, None when it was absent."""
        self._check_key(key)
        info, path = self.info, self.store.path
        if info is None:
            return None
        with os_errors(path, key, "read"), self.store._archive.reading_member(key, info) as (offset, fd):
            return [read_member(path, key, info, offset, fd, *r.resolve(info.file_size)) for r in ranges]
