"""Opening record files so that a compressed file cut short is an error.

Beam's `CompressedFile` stops quietly where a compressed stream's bytes end:
a truncated `.gz` reads as a shorter file, its last line cut in the middle,
and nothing says the rest is lost. `open_checked` decompresses gzip, bzip2,
xz/lzma and deflate itself and raises `TruncatedFile` when the file ends
before the stream does, with the position reached, and refuses a file with
corrupt data (`CorruptFile`) before returning any of it: gzip's CRC is
checked only at the end of a stream, so bytes read before the damage was
found cannot be trusted (see `_check_integrity`; it costs a second
decompression of each compressed file). Other compressions (zstd) are left
to Beam. Both errors are `OSError`s, which the readers turn into one
`unreadable_file` dead letter after the records read before the damage.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

_MIME = "application/octet-stream"
# Small enough to say roughly where a stream breaks, large enough to be cheap.
_READ_BYTES = 64 << 10
# Decompressors with `.eof` and `.unused_data`, as Beam names the formats.
_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    CompressionTypes.GZIP: lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    CompressionTypes.DEFLATE: zlib.decompressobj,
    CompressionTypes.BZIP2: bz2.BZ2Decompressor,
    CompressionTypes.LZMA: lzma.LZMADecompressor,
}
_VERIFY_BYTES = 1 << 20
_DECOMPRESS_ERRORS = (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError)


class TruncatedFile(OSError):
    """The file ended inside a compressed stream."""


class CorruptFile(OSError):
    """The file's bytes are not a valid compressed stream."""


def open_checked(path: str) -> BinaryIO:
    """`path` opened for reading, decompressed by its name's compression.

    Raises `CorruptFile` at once if the data is corrupt anywhere; reads raise
    `TruncatedFile` where a file cut short stops, after returning everything
    before it.
    """
    kind = CompressionTypes.detect_compression_type(path)
    if kind not in _DECOMPRESSORS:
        return FileSystems.open(path, _MIME)
    _check_integrity(path, kind)
    return _CheckedStream(_open_raw(path), kind)


def stream_ends_whole(path: str) -> bool:
    """Whether the compressed file at `path` ends where its last stream does.

    False for a file cut short, or damaged (a writer's bytes not all in place
    yet can look like either), and for a compression this module cannot
    check (zstd): Beam reads those silently short. Costs one decompression of
    the file.
    """
    kind = CompressionTypes.detect_compression_type(path)
    if kind not in _DECOMPRESSORS:
        return False
    try:
        _read_through(path, kind)
    except (TruncatedFile, CorruptFile):
        return False
    return True


def _open_raw(path: str) -> BinaryIO:
    return FileSystems.open(path, _MIME, CompressionTypes.UNCOMPRESSED)


def _check_integrity(path: str, kind: str) -> None:
    """Raises `CorruptFile` if any of the file's data is corrupt.

    A first pass over the whole file, because gzip checks a stream's CRC only
    at its end: bytes damaged mid-file can decompress into lines that look
    valid (even copies of earlier lines) before the check fails, and records
    read from them could not be taken back. A file cut short passes: what
    precedes the cut is exactly what was written.
    """
    try:
        _read_through(path, kind)
    except TruncatedFile:
        pass
    except CorruptFile as error:
        raise CorruptFile(
            f"{error}; no record of the file is used, since data before "
            "the damage may be altered too"
        ) from None


def _read_through(path: str, kind: str) -> None:
    """Decompresses the whole file, keeping nothing; raises `TruncatedFile`
    or `CorruptFile` where it breaks."""
    with _CheckedStream(_open_raw(path), kind) as stream:
        while stream.read(_VERIFY_BYTES):
            pass


class _CheckedStream:
    """A read-only binary stream over a compressed one (concatenated streams,
    as `cat a.gz b.gz` makes, read as one)."""

    def __init__(self, raw: BinaryIO, kind: str) -> None:
        self._raw = raw
        self._kind = kind
        self._decompressor = _DECOMPRESSORS[kind]()
        self._compressed_read = 0  # bytes of the file consumed so far
        self._produced = 0  # decompressed bytes returned so far
        self._started = False  # whether the current stream has any input
        self._pending = bytearray()  # decompressed, not yet returned
        self._error: OSError | None = None  # raised once _pending is drained

    def __enter__(self) -> _CheckedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._raw.close()

    def read(self, size: int = -1) -> bytes:
        """Up to `size` decompressed bytes (all that is left if negative);
        b"" at the end."""
        if self._error is not None and not self._pending:
            raise self._error
        while self._error is None and (size < 0 or len(self._pending) < size):
            try:
                more = self._decompress_some()
            except OSError as error:
                # Everything before the damage is returned first.
                self._error = error
                return self.read(size)
            if not more:
                break
            self._pending += more
        if size < 0:
            size = len(self._pending)
        out = bytes(self._pending[:size])
        del self._pending[:size]
        return out

    def _decompress_some(self) -> bytes:
        """The next decompressed bytes, or b"" at the end of the file."""
        while True:
            data = self._next_input()
            if not data:
                self._check_complete()
                return b""
            try:
                out = self._decompressor.decompress(data)
            except _DECOMPRESS_ERRORS as error:
                start = self._compressed_read - len(data)
                raise CorruptFile(
                    f"{self._name()} data is corrupt within compressed bytes "
                    f"{start:,} to {self._compressed_read:,} ({self._produced:,} "
                    f"bytes decompressed before): {error}"
                ) from None
            if out:
                self._produced += len(out)
                return out

    def _next_input(self) -> bytes:
        """The next compressed bytes: what a finished stream left over (the
        start of the next one), else the file's next bytes."""
        if self._decompressor.eof:
            leftover = self._decompressor.unused_data
            self._decompressor = _DECOMPRESSORS[self._kind]()
            self._started = bool(leftover)
            if leftover:
                return leftover
        data = self._raw.read(_READ_BYTES)
        self._compressed_read += len(data)
        if data:
            self._started = True
        return data

    def _check_complete(self) -> None:
        if self._started and not self._decompressor.eof:
            raise TruncatedFile(
                f"{self._name()} stream ends early: the file stops after "
                f"{self._compressed_read:,} compressed bytes "
                f"({self._produced:,} bytes decompressed); the rest is lost"
            )

    def _name(self) -> str:
        return {"bzip2": "bzip2", "lzma": "xz/lzma"}.get(self._kind, self._kind)
