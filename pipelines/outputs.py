"""Reading a finished job's JSON Lines outputs back, for summaries and reports."""

import glob
import json
import pathlib
from typing import TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)


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
