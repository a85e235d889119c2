"""A pipeline command's JSON Lines outputs: written at the end of a batch
job or in parts while a streaming job runs, and read back for summaries and
reports."""

import enum
import glob
import json
import logging
import os
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


class EarlierOutputs(enum.Enum):
    """What a live run does with the outputs an earlier run left under the
    names it writes: its parts, numbered from 0, would overwrite some of
    them and sit beside the rest."""

    # It resumes that run's checkpoint: its parts go on from that run's.
    ADD_TO = "add to"
    # Its input is generated afresh, so are the outputs of it.
    REPLACE = "replace"
    # Its input is the user's files, which may be gone since (`--after_read
    # delete` or `archive`): replacing the outputs would lose them for good.
    REFUSE = "refuse"


class EarlierOutputsExist(ValueError):
    """A live run that does not resume would replace an earlier run's outputs."""


def write_parts(
    flush_seconds: float, earlier: EarlierOutputs = EarlierOutputs.REFUSE
) -> WriteOutputs:
    """Streaming: every output as parts written while the job runs, through
    one keyed stage; `earlier` says what becomes of the outputs an earlier
    run left under the same names (by default, nothing: the job is refused)."""

    def write(outputs: dict[str, beam.PCollection]) -> None:
        settle_earlier_outputs(list(outputs), earlier)
        outputs | "WriteOutputs" >> WriteJsonLineParts(flush_seconds=flush_seconds)

    return write


def settle_earlier_outputs(prefixes: list[str], earlier: EarlierOutputs) -> None:
    """Deletes the outputs an earlier run left under `prefixes`, or raises
    `EarlierOutputsExist`, as `earlier` says; idempotent."""
    if earlier is EarlierOutputs.ADD_TO:
        return
    found = output_files(prefixes)
    if not found:
        return
    if earlier is EarlierOutputs.REFUSE:
        raise EarlierOutputsExist(
            f"{os.path.dirname(found[0])} holds the outputs of an earlier run "
            f"({_files(found)}), which a live run that does not resume its "
            "checkpoint would replace, though their input may be gone: if a "
            "live run wrote them, resume it with the --checkpoint_dir it "
            "logged; otherwise give another --output, or delete them"
        )
    _log.warning("deleting %d files an earlier run wrote", len(found))
    FileSystems.delete(found)


def _files(paths: list[str]) -> str:
    first = os.path.basename(paths[0])
    return first if len(paths) == 1 else f"{first} and {len(paths) - 1} more"


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
