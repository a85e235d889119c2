"""A pipeline command's JSON Lines outputs: written at the end of a batch
job or in parts while a streaming job runs, and read back for summaries and
reports."""

import glob
import json
import logging
import pathlib
from collections.abc import Callable
from typing import TypeVar

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from google.protobuf import json_format
from google.protobuf.message import Message

from transforms.records.json_files import WriteJsonLineFiles, output_files
from transforms.records.json_parts import WriteJsonLineParts

_log = logging.getLogger("pipelines.outputs")
M = TypeVar("M", bound=Message)
# The HTML report `pipelines.report` writes beside the outputs.
REPORT_NAME = "report.html"

# Writes each PCollection under its path prefix.
WriteOutputs = Callable[[dict[str, beam.PCollection]], None]


def write_at_end(outputs: dict[str, beam.PCollection]) -> None:
    """Batch: every output in files written when the input ends, through
    one sink, one file per bundle of the stage that computes it: a fixed
    number of files would send every record through one more shuffle to
    the few tasks that write them."""
    outputs | "WriteOutputs" >> WriteJsonLineFiles()


def write_parts(flush_seconds: float, *, replace_earlier: bool = False) -> WriteOutputs:
    """Streaming: every output as parts written while the job runs, through
    one keyed stage. With `replace_earlier` (a job that does not resume a
    checkpoint), the files an earlier run wrote under the outputs' names are
    deleted first: this run's parts, numbered from 0, would overwrite some
    of an earlier live run's and sit beside the rest."""

    def write(outputs: dict[str, beam.PCollection]) -> None:
        if replace_earlier:
            earlier = output_files(list(outputs))
            if earlier:
                _log.warning("deleting %d files an earlier run wrote", len(earlier))
                FileSystems.delete(earlier)
        outputs | "WriteOutputs" >> WriteJsonLineParts(flush_seconds=flush_seconds)

    return write


def read_output(output: pathlib.Path, name: str, message_type: type[M]) -> list[M]:
    """Every record of the `name`*.jsonl shards under `output`, as messages."""
    records = []
    for path in sorted(glob.glob(str(output / f"{name}*.jsonl"))):
        with open(path, encoding="utf-8") as lines:
            records.extend(
                json_format.ParseDict(json.loads(line), message_type())
                for line in lines
                if line.strip()
            )
    return records
