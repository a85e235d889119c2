"""Files dropped into a followed directory, as a live feed would drop them."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import TypeVar

from google.protobuf.message import Message

from transforms.records.readers import json_line

R = TypeVar("R")


def drop_file(directory: pathlib.Path, name: str, records: Sequence[Message]) -> None:
    """Writes `records` as JSON Lines in `directory/name` in one rename: a
    follower never sees the file half written."""
    hidden = directory / f".{name}"
    hidden.write_text("".join(json_line(r) + "\n" for r in records))
    hidden.rename(directory / name)


def cut(records: Sequence[R], parts: int) -> list[Sequence[R]]:
    """`records` cut into `parts` consecutive runs of (nearly) equal size."""
    n = len(records)
    return [records[i * n // parts : (i + 1) * n // parts] for i in range(parts)]
