"""Read record files into messages, with every bad record as a dead letter.

`ReadRecords` matches a file pattern with Beam's `fileio`, so it runs on any
runner and any Beam filesystem. It reads each text file in one piece: that is
what gives exact line numbers and a per-file CSV header, so text parallelism
is per file (shard large inputs into several files). Parquet files are read
per row group (`parquet_parts`), so one large file feeds every worker. Text files may
be compressed (`.gz`, `.bz2`, ... detected from the name by Beam).

Formats, one record per physical line for text:

- `jsonl` (`.jsonl`, `.json`, `.ndjson`): one JSON object per line.
- `csv` (`.csv`): the first non-blank line of each file names the columns,
  and must name those the record type requires (`parse.required_fields`):
  if it does not (a file without a header, say), it is a `csv_header` dead
  letter and so is every row after it. Quoted fields may hold commas and
  doubled quotes, but not line breaks: a row that leaves a quoted field
  open is a dead letter, and so is each line after it up to the one that
  closes the field, the rest of its record.
- `parquet` (`.parquet`): one record per row; timestamp columns are fine.

`ReadRecords` and `ParseRecords` return a `DoOutputsTuple` with the valid
messages under `RECORDS` and `DeadLetter`s under `DEAD_LETTERS`. Nothing is
dropped without a count (see `dead_letters` for the counters): records read
plus dead letters is the number of non-blank lines or rows, usable CSV
headers aside. Outputs keep the timestamp of their input element (the minimum, for
files); stamp event times downstream where windowing needs them.

`to_json_dict` and `WriteJsonLines` write messages back as JSON Lines that
these readers accept.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import zlib
from collections.abc import Callable, Iterator, Mapping
from json.encoder import encode_basestring
from typing import Any, BinaryIO, ClassVar

import apache_beam as beam
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes, FileMetadata, FileSystem
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from transforms.records.compressed import open_checked
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.dead_letters import (
    CATEGORIES,
    DEAD_LETTERS,
    METRICS_NAMESPACE,
    RECORDS,
    UNREADABLE_FILE,
    Parser,
    Rejected,
    counter,
    dead_letter,
    decode,
    parse_json,
    parse_row,
    row_raw,
)
from transforms.records.file_reader import FORMATS, FileReader
from transforms.records.parquet_parts import ReadParquetPart, SplitRowGroups
from transforms.records.parse import (
    parse_click_event,
    parse_query_event,
    parse_search_query,
)
from transforms.records.photon_pb2 import ClickEvent, QueryEvent
from transforms.records.special_files import refuse_special
from transforms.records.zeitgeist_pb2 import SearchQuery

__all__ = [
    "CATEGORIES",
    "DEAD_LETTERS",
    "DEFAULT_MAX_LINE_BYTES",
    "FORMATS",
    "METRICS_NAMESPACE",
    "RECORDS",
    "FORMAT_SUFFIXES",
    "ParseRecords",
    "ReadClickEvents",
    "ReadQueryEvents",
    "ReadRecords",
    "ReadSearchQueries",
    "WriteJsonLines",
    "infer_format",
    "json_line",
    "read_file",
    "record_format",
    "to_json_dict",
]

DEFAULT_MAX_LINE_BYTES = 1 << 20

#: File-name suffix (before any compression suffix) to record format.
FORMAT_SUFFIXES = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
# How `read_file` reads an opened file: (reader, format, file) to outputs.
ReadOpened = Callable[[FileReader, str, BinaryIO], Iterator[Any]]
# Lines handed to the text sink as one record (about 2 MB of JSON at most).
_LINES_PER_BLOCK = 10_000
# What a damaged file raises while being read (e.g. a ".gz" that is not gzip).
_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException)


def infer_format(file_pattern: str) -> str:
    """The format named by a pattern's extension, ignoring a compression
    suffix such as `.gz`; raises ValueError if there is none."""
    name = file_pattern
    if CompressionTypes.detect_compression_type(name) != CompressionTypes.UNCOMPRESSED:
        name = name.rsplit(".", 1)[0]
    dot = name.rfind(".")
    fmt = FORMAT_SUFFIXES.get(name[dot:].lower()) if dot >= 0 else None
    if fmt is None:
        raise ValueError(
            f"cannot infer the record format of {file_pattern!r}; "
            f"pass format= one of {FORMATS}"
        )
    return fmt


def read_file(
    path: str,
    parser: Parser,
    record_type: str,
    fmt: str,
    max_line_bytes: int,
    read: ReadOpened = FileReader.read,
) -> Iterator[Any]:
    """The messages and tagged dead letters of the whole file at `path`.

    `read(reader, fmt, fh)` reads the opened file; `FileReader.read`, record
    by record, unless a caller reads it otherwise (in Arrow tables). A file
    that breaks off (e.g. a corrupt `.gz`) ends with one `unreadable_file`
    dead letter where reading stopped; a FIFO, socket or device is one such
    dead letter, never opened. Counts the file's records and blank lines in
    the `METRICS_NAMESPACE` counters.
    """
    reader = FileReader(parser, record_type, max_line_bytes, path)
    try:
        refuse_special(path)
        with open_checked(path) as fh:
            yield from read(reader, fmt, fh)
    except _READ_ERRORS as e:
        # The rest of the file is lost; say where reading stopped.
        rejected = Rejected(
            UNREADABLE_FILE,
            f"unreadable file after line {reader.done}: {e}",
        )
        yield reader.dead(rejected, b"", reader.done + 1)
    counter("records_read").inc(reader.records_read)
    counter("blank_lines").inc(reader.blank_lines)


def line_limit(max_line_bytes: int) -> int:
    """`max_line_bytes`, checked: a reader's limit on a text line."""
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
    return max_line_bytes


def record_format(file_pattern: str, format: str | None) -> str:
    """`format` if given, else the one `file_pattern`'s extension names;
    raises ValueError for a format not in `FORMATS`."""
    fmt = format or infer_format(file_pattern)
    if fmt not in FORMATS:
        raise ValueError(f"unknown record format {fmt!r}; expected {FORMATS}")
    return fmt


class _ReadFileFn(beam.DoFn):
    def __init__(
        self, parser: Parser, record_type: str, fmt: str, max_line_bytes: int
    ) -> None:
        self._parser = parser
        self._record_type = record_type
        self._format = fmt
        self._max_line_bytes = max_line_bytes

    def process(self, readable_file: fileio.ReadableFile) -> Iterator[Any]:
        return read_file(
            readable_file.metadata.path,
            self._parser,
            self._record_type,
            self._format,
            self._max_line_bytes,
        )


class ReadRecords(beam.PTransform):
    """Read files matching `file_pattern` into `parser`'s messages.

    `format` is one of `FORMATS`, or None to infer it from the pattern's
    extension. Text lines longer than `max_line_bytes` become `oversized`
    dead letters. Returns a `DoOutputsTuple`: valid `record_type` messages
    under `RECORDS`, `DeadLetter`s (source = file path, location = "line N"
    or "row N", counting from 1) under `DEAD_LETTERS`; both outputs are
    typed, so they are encoded with their `ProtoCoder`. A file that breaks
    off (e.g. a corrupt `.gz`) yields one `unreadable_file` dead letter where
    reading stopped. A pattern without a wildcard that matches nothing is an
    error; a wildcard may match nothing.
    """

    def __init__(
        self,
        file_pattern: str,
        parser: Parser,
        record_type: type[Message],
        format: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        super().__init__()
        self._format = record_format(file_pattern, format)
        self._max_line_bytes = line_limit(max_line_bytes)
        self._file_pattern = file_pattern
        self._record_type = record_type
        self._parser = parser

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        record_type = self._record_type.DESCRIPTOR.name
        if self._format == "parquet":
            parts = pbegin | "Parts" >> MatchedParquetParts(self._file_pattern)
            read_part = ReadParquetPart(self._parser, record_type)
            return parts | "Read" >> split_outputs(read_part, self._record_type)
        files = pbegin | "Files" >> MatchedFiles(self._file_pattern)
        read_file = _ReadFileFn(
            self._parser, record_type, self._format, self._max_line_bytes
        )
        return files | "Read" >> split_outputs(read_file, self._record_type)


class MatchedFiles(beam.PTransform):
    """The files matching a pattern, opened, spread over workers."""

    def __init__(self, file_pattern: str) -> None:
        super().__init__()
        self._file_pattern = file_pattern

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        matched = pbegin | "Match" >> fileio.MatchFiles(self._file_pattern)
        unlisted = (
            pbegin
            | "Pattern" >> beam.Create([self._file_pattern])
            | "Unlisted" >> beam.FlatMap(unlisted_matches)
        )
        return (
            (matched, unlisted)
            | "AllMatches" >> beam.Flatten()
            # Spread files over workers rather than fusing all behind one match.
            | "SpreadFiles" >> beam.Reshuffle()
            | "Open" >> fileio.ReadMatches()
        )


def unlisted_matches(file_pattern: str) -> list[FileMetadata]:
    """What a local glob matches that Beam's match leaves out without a
    word, as it lists only what it can size as a file.

    An entry that cannot be sized (a dangling symbolic link) is returned, to
    be read as any matched file is, so that it becomes an `unreadable_file`
    dead letter with the reason. A directory is not: it holds no records of
    its own, and reading its files is not what a pattern of files asks for
    (give `DIR/*` for them), but a user whose pattern matches one (a Spark
    output directory `part.jsonl/`, say) may have expected its records, so
    it is counted in `directories_skipped`, which the summary shows.
    """
    entries, directories = glob_entries(file_pattern)
    counter("directories_skipped").inc(len(directories))
    return [FileMetadata(p, 0) for p in entries if not os.path.exists(p)]


def glob_entries(file_pattern: str) -> tuple[list[str], list[str]]:
    """The paths a local glob matches, as Beam's match walks for them: the
    entries other than directories, and the directories. None of either
    for an object store's pattern (it has neither directories nor links)
    or a plain path (which matches itself). `**` reaches into the
    directories it matches, whose files are matched: it matches no
    directory."""
    if "://" in file_pattern or not any(c in file_pattern for c in "*?["):
        return [], []
    # Where Beam's match lists: the directory of the part before any glob.
    root = os.path.dirname(re.match(r"[^[*?]*", file_pattern).group(0))
    matches = re.compile(FileSystem.translate_pattern(file_pattern)).match
    counts_directories = "**" not in file_pattern
    entries, matched_directories = [], []
    for folder, directories, files in os.walk(root):
        if counts_directories:
            paths = (os.path.join(folder, name) for name in directories)
            matched_directories += [p for p in paths if matches(p)]
        entries += [p for p in (os.path.join(folder, n) for n in files) if matches(p)]
    return entries, matched_directories


class MatchedParquetParts(MatchedFiles):
    """The row groups (`ParquetPart`) of the Parquet files matching a pattern,
    spread over workers, so that one large file feeds them all."""

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            super().expand(pbegin)
            | "SplitRowGroups" >> beam.ParDo(SplitRowGroups())
            | "SpreadRowGroups" >> beam.Reshuffle()
        )


def split_outputs(fn: beam.DoFn, record_type: type[Message]) -> beam.PTransform:
    """`fn`'s records and dead letters as two typed outputs."""
    return (
        beam.ParDo(fn)
        .with_output_types(record_type, **{DEAD_LETTERS: DeadLetter})
        .with_outputs(DEAD_LETTERS, main=RECORDS)
    )


class _ReadOneType(ReadRecords):
    """`ReadRecords` with the parser and message type fixed by a subclass.

    The one constructor of every typed reader: a subclass names its parser
    and message type as class attributes, and callers pass only the file
    arguments.
    """

    _PARSER: ClassVar[Parser]
    _RECORD_TYPE: ClassVar[type[Message]]

    def __init__(
        self,
        file_pattern: str,
        format: str | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        super().__init__(
            file_pattern, self._PARSER, self._RECORD_TYPE, format, max_line_bytes
        )


class ReadSearchQueries(_ReadOneType):
    """`ReadRecords` of Zeitgeist `SearchQuery` with `parse_search_query`."""

    _PARSER = staticmethod(parse_search_query)
    _RECORD_TYPE = SearchQuery


class ReadQueryEvents(_ReadOneType):
    """`ReadRecords` of Photon `QueryEvent` with `parse_query_event`."""

    _PARSER = staticmethod(parse_query_event)
    _RECORD_TYPE = QueryEvent


class ReadClickEvents(_ReadOneType):
    """`ReadRecords` of Photon `ClickEvent` with `parse_click_event`."""

    _PARSER = staticmethod(parse_click_event)
    _RECORD_TYPE = ClickEvent


class _ParseFn(beam.DoFn):
    def __init__(self, parser: Parser, record_type: str, source: str) -> None:
        self._parser = parser
        self._record_type = record_type
        self._source = source

    def start_bundle(self) -> None:
        # Counted per bundle, not per element: counter updates are not free.
        self._records_read = 0
        self._blank_lines = 0

    def process(self, element: bytes | str | Mapping[str, Any]) -> Iterator[Any]:
        if isinstance(element, (bytes, str)) and (not element or element.isspace()):
            self._blank_lines += 1
            return
        try:
            yield self._parse(element)
            self._records_read += 1
        except Rejected as rejected:
            raw = _raw(element)
            yield dead_letter(rejected, raw, self._source, "", self._record_type)

    def _parse(self, element: bytes | str | Mapping[str, Any]) -> Message:
        if isinstance(element, Mapping):
            return parse_row(self._parser, element)
        if isinstance(element, bytes):
            return parse_json(self._parser, decode(element))
        if isinstance(element, str):
            return parse_json(self._parser, element)
        # A wrongly typed PCollection is a bug in the pipeline, not bad data.
        raise TypeError(
            "ParseRecords takes JSON lines (str or bytes) or row mappings, "
            f"got {type(element).__name__}"
        )

    def finish_bundle(self) -> None:
        counter("records_read").inc(self._records_read)
        counter("blank_lines").inc(self._blank_lines)


def _raw(element: bytes | str | Mapping[str, Any]) -> bytes:
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode("utf-8", "surrogatepass")
    return row_raw(element)


class ParseRecords(beam.PTransform):
    """Parse a PCollection of JSON lines (str or bytes) or of row mappings.

    The in-memory counterpart of `ReadRecords`, with the same outputs,
    reasons and counters. Dead letters carry `source` and no location, since
    elements have no position. Blank lines are skipped and counted.
    """

    def __init__(
        self, parser: Parser, record_type: type[Message], source: str = ""
    ) -> None:
        super().__init__()
        self._record_type = record_type
        self._parse_fn = _ParseFn(parser, record_type.DESCRIPTOR.name, source)

    def expand(self, pcoll: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
        return pcoll | "Parse" >> split_outputs(self._parse_fn, self._record_type)


def to_json_dict(message: Message) -> dict[str, Any]:
    """A JSON-ready dict of the fields set in `message`, in field-number order.

    Keys are the proto (snake_case) field names; 64-bit integers stay ints
    (unlike protobuf's JSON mapping, which quotes them), enums become their
    names, bytes become base64 text and nested messages nested dicts. A map
    becomes an object in key order, its keys text as in protobuf's JSON
    mapping (`"7"`, `"true"`), so that `json_format.ParseDict` reads it back.
    """
    return {
        field.name: _json_value(field, value) for field, value in message.ListFields()
    }


def _json_value(field: FieldDescriptor, value: Any) -> Any:
    entry = _map_entry(field)
    if entry is not None:
        values = entry.fields_by_name["value"]
        return {
            _map_key(key): _json_scalar(values, value[key]) for key in sorted(value)
        }
    if field.is_repeated:
        return [_json_scalar(field, item) for item in value]
    return _json_scalar(field, value)


def _map_entry(field: FieldDescriptor) -> Descriptor | None:
    """The entry type of a map field (None if `field` is no map)."""
    entry = field.message_type
    return entry if entry is not None and entry.GetOptions().map_entry else None


def _map_key(key: str | int | bool) -> str:
    """A map key as JSON object keys have it: text."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return key if isinstance(key, str) else str(key)


def _json_scalar(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return to_json_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def json_line(message: Message) -> str:
    """`message` as one compact JSON line (`to_json_dict`), without newline.

    Byte for byte `json.dumps(to_json_dict(message), ensure_ascii=False,
    separators=(",", ":"))`, written field by field rather than through a
    dict: it runs once per output record, and this is 2.4 times faster for
    a `WindowCount` (less where float repr, the same in both, dominates).
    """
    return _object_text(message)


# Writes one set field: its key '"name":' and its value's JSON text.
_FieldText = Callable[[Any], str]


class _FieldTexts(dict[FieldDescriptor, _FieldText]):
    """Each field's `_FieldText`, made the first time the field is written."""

    def __missing__(self, field: FieldDescriptor) -> _FieldText:
        text = self[field] = _field_text(field)
        return text


_FIELD_TEXTS = _FieldTexts()


def _object_text(message: Message) -> str:
    texts = _FIELD_TEXTS
    return (
        "{"
        + ",".join([texts[field](value) for field, value in message.ListFields()])
        + "}"
    )


def _field_text(field: FieldDescriptor) -> _FieldText:
    key = encode_basestring(field.name) + ":"
    entry = _map_entry(field)
    if entry is not None:
        value_text = _value_text(entry.fields_by_name["value"])

        def map_text(values) -> str:
            pairs = [
                encode_basestring(_map_key(k)) + ":" + value_text(values[k])
                for k in sorted(values)
            ]
            return key + "{" + ",".join(pairs) + "}"

        return map_text
    value_text = _value_text(field)
    if field.is_repeated:
        return lambda values: key + "[" + ",".join(map(value_text, values)) + "]"
    return lambda value: key + value_text(value)


def _value_text(field: FieldDescriptor) -> Callable[[Any], str]:
    """How `json.dumps` writes one of `field`'s values as `to_json_dict` has it."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _object_text
    if field.type == FieldDescriptor.TYPE_ENUM:
        # A number without a name raises KeyError, as in `to_json_dict`.
        values = field.enum_type.values_by_number
        return {
            number: encode_basestring(v.name) for number, v in values.items()
        }.__getitem__
    if field.type == FieldDescriptor.TYPE_BYTES:
        return _bytes_text
    if field.type == FieldDescriptor.TYPE_BOOL:
        return _bool_text
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _float_text
    if field.type == FieldDescriptor.TYPE_STRING:
        return encode_basestring
    return int.__repr__


def _bytes_text(value: bytes) -> str:
    # Base64 needs no escaping; `b2a_base64` is what `b64encode` calls.
    return '"' + binascii.b2a_base64(value, newline=False).decode("ascii") + '"'


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


# `json.dumps` writes these floats in JavaScript's spelling, not Python's.
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _float_text(value: float) -> str:
    text = float.__repr__(value)
    return _NON_FINITE.get(text, text)


class WriteJsonLines(beam.PTransform):
    """Write messages as JSON Lines (`to_json_dict`) with `WriteToText`.

    Files are named `<path_prefix>-SSSSS-of-NNNNN.jsonl`; returns the
    PCollection of written file names. `num_shards` fixes their number (0:
    one per bundle). Without a fixed number, `WriteJsonLineFiles` writes
    the same files at less cost, and several outputs in one step.
    """

    def __init__(self, path_prefix: str, num_shards: int = 1) -> None:
        super().__init__()
        self._path_prefix = path_prefix
        self._num_shards = num_shards

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return (
            pcoll
            | "ToJson" >> beam.Map(json_line)
            # Blocks of lines, each written as one text record: the sink's
            # steps then run per block, not per line (its re-windowing and
            # side-input lookup cost more than the JSON itself).
            | "Batch"
            >> beam.BatchElements(max_batch_size=_LINES_PER_BLOCK, record_metrics=False)
            | "Join" >> beam.Map("\n".join)
            | "Write"
            >> beam.io.WriteToText(
                self._path_prefix,
                file_name_suffix=".jsonl",
                num_shards=self._num_shards,
            )
        )
