"""A JSON Lines sink for unbounded PCollections: numbered part files,
written while the job runs, each exactly once.

Beam's `WriteToText` only writes when its input ends, and `fileio.WriteToFiles`
names a file by window and shard but not by pane, so a global window fired
again and again would overwrite one file. `WriteJsonLineParts` is a MillWheel
production instead: a stateful DoFn per shard buffers the lines in state and,
`flush_seconds` after the first of them (processing time), writes them to the
next numbered part, `<path_prefix>-SSS-PPPPPP.jsonl`, by writing a hidden
temporary file and renaming it. The part number is state too, so a runner that
replays a batch with its state (the SparkRunner after a crash or a retried
task) rewrites the same part with the same lines: nothing twice, nothing lost.
When the input ends (a drain, or a bounded input), the rest is flushed.
"""

from __future__ import annotations

import os
import uuid
import zlib
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.coders import BooleanCoder, StrUtf8Coder, VarIntCoder
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import Duration, Timestamp

from transforms.millwheel.state_params import apply_with_state_params, path_param
from transforms.records.durable_files import sync_directory, sync_file
from transforms.records.json_files import (
    naming_unwritable,
    outputs_by_prefix,
    part_path,
)
from transforms.records.readers import json_line

_PAST = Timestamp(0)


_RESUME = "the job resumes from its last committed batch once this is fixed"


def _write_atomically(path: str, lines: Iterable[str]) -> None:
    directory, name = os.path.split(path)
    temporary = FileSystems.join(directory, f".{name}.{uuid.uuid4().hex}")
    # The part's lines are still in state: the batch that failed to write
    # them did not commit, and is replayed.
    with naming_unwritable(path, _RESUME):
        with FileSystems.create(temporary) as out:
            for line in lines:
                out.write(line.encode("utf-8") + b"\n")
            # The batch's commit, written after this, says the part exists.
            sync_file(out)
        # A rename replaces a part an earlier attempt of the same batch wrote.
        FileSystems.rename([temporary], [path])
        sync_directory(directory)


class _PartWriter(beam.DoFn):
    """Per (path prefix, shard), the key. State:

    - `buffer`: lines not yet written; cleared by each flush.
    - `next_part`: the number the next flush writes; kept for the job's life.
    - `pending`: whether the flush timer is set, so that a steady input does
      not push the flush back forever.

    Timers: `flush` (processing time), `flush_seconds` after the first line
    of a buffer; `end` (event time) at the end of the global window, which
    only the end of the input reaches: it writes what is left.
    """

    BUFFER = BagStateSpec("buffer", StrUtf8Coder())
    NEXT_PART = ReadModifyWriteStateSpec("next_part", VarIntCoder())
    PENDING = ReadModifyWriteStateSpec("pending", BooleanCoder())
    FLUSH = TimerSpec("flush", TimeDomain.REAL_TIME)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def __init__(self, flush_seconds: float) -> None:
        # Seconds, not a Beam `Duration`: a Duration of zero is true.
        self._delay_seconds = flush_seconds

    def process(
        self,
        element: tuple[tuple[str, int], str],
        buffer=beam.DoFn.StateParam(BUFFER),
        pending=beam.DoFn.StateParam(PENDING),
        flush=beam.DoFn.TimerParam(FLUSH),
        end=beam.DoFn.TimerParam(END),
    ) -> None:
        buffer.add(element[1])
        if not pending.read():
            pending.write(True)
            # With no delay, a time already past: the runner fires it as soon
            # as this batch's elements are in (the SparkRunner, in the same
            # batch), so a stop after the batch leaves nothing unwritten.
            delay = self._delay_seconds
            flush.set(Timestamp.now() + Duration.of(delay) if delay > 0 else _PAST)
            end.set(GlobalWindow().max_timestamp())

    @on_timer(FLUSH)
    def on_flush(
        self,
        key=beam.DoFn.KeyParam,
        buffer=beam.DoFn.StateParam(BUFFER),
        next_part=beam.DoFn.StateParam(NEXT_PART),
        pending=beam.DoFn.StateParam(PENDING),
    ) -> Iterator[str]:
        yield from self._write(key, buffer, next_part, pending)

    @on_timer(END)
    def on_end(
        self,
        key=beam.DoFn.KeyParam,
        buffer=beam.DoFn.StateParam(BUFFER),
        next_part=beam.DoFn.StateParam(NEXT_PART),
        pending=beam.DoFn.StateParam(PENDING),
    ) -> Iterator[str]:
        yield from self._write(key, buffer, next_part, pending)

    def _write(self, key, buffer, next_part, pending) -> Iterator[str]:
        lines = list(buffer.read())
        pending.clear()
        if not lines:
            return
        part = next_part.read() or 0
        path = part_path(*key, part)
        _write_atomically(path, lines)
        buffer.clear()
        next_part.write(part + 1)
        yield path


class WriteJsonLineParts(beam.PTransform):
    """Write messages as JSON Lines parts while an unbounded job runs.

    Apply it to one PCollection, with `path_prefix`, or to a dict of
    PCollections keyed by their path prefixes: all of them then go through
    one keyed stage, so a streaming job pays one shuffle a batch for all its
    outputs instead of one each. Per prefix, `shards` stateful writers share
    the lines (by a hash of the line); each writes
    `<path_prefix>-SSS-PPPPPP.jsonl` parts `flush_seconds` after its first
    buffered line (see the module docstring for why this is exactly once).
    Returns the PCollection of written part paths. The lines are what
    `WriteJsonLines` writes in batch, so readers of `<prefix>*.jsonl` read
    either.
    """

    def __init__(
        self,
        path_prefix: str | None = None,
        shards: int = 1,
        flush_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        if flush_seconds < 0:
            raise ValueError(f"flush_seconds must be 0 or more, got {flush_seconds}")
        self._prefix = path_prefix
        self._shards = shards
        self._flush_seconds = flush_seconds

    def expand(
        self, outputs: beam.PCollection | dict[str, beam.PCollection]
    ) -> beam.PCollection:
        outputs = outputs_by_prefix(outputs, self._prefix, "WriteJsonLineParts")
        lines = [
            pcoll
            | f"ToJson{i}"
            >> beam.Map(_keyed_line, prefix, self._shards).with_output_types(
                tuple[tuple[str, int], str]
            )
            for i, (prefix, pcoll) in enumerate(outputs.items())
        ]
        in_global_window = (
            lines
            | "Merge" >> beam.Flatten()
            # State lives for the job, not for the windows the messages had.
            | "GlobalWindow" >> beam.WindowInto(GlobalWindows())
        )
        # Part numbers are kept per prefix: under other prefixes a restart
        # would number from 0 again, and leave the old ones' buffers behind.
        return apply_with_state_params(
            in_global_window,
            "WriteParts",
            beam.ParDo(_PartWriter(self._flush_seconds)),
            {"path_prefixes": sorted(path_param(prefix) for prefix in outputs)},
        )


def _keyed_line(message, prefix: str, shards: int) -> tuple[tuple[str, int], str]:
    line = json_line(message)
    return (prefix, zlib.crc32(line.encode("utf-8")) % shards), line
