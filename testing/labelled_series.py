"""Reading a folder of labelled series in NAB's layout.

The folder holds `<category>/<series>.csv` files (`timestamp,value`, one row
per bucket), `windows.json` (`{"<category>/<series>.csv": [[start, end],
...]}`, timestamps as in the CSVs) and, optionally, a reference detector's
per-row scores (`reference-<name>/<category>/<name>_<series>.csv`,
`timestamp,anomaly_score`). This is the layout of
`shared/data/labelled-series/` and of NAB itself, so a user's own labelled
series evaluate the same way.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import pathlib
from dataclasses import dataclass

WINDOWS_FILE = "windows.json"


@dataclass(frozen=True)
class Series:
    """One labelled series: its rows and its windows as inclusive row ranges."""

    name: str  # "<category>/<series>.csv", as in windows.json
    timestamps: tuple[datetime.datetime, ...]
    values: tuple[float, ...]
    windows: tuple[tuple[int, int], ...]

    @property
    def category(self) -> str:
        return self.name.split("/", 1)[0]


def parse_time(text: str) -> datetime.datetime:
    """A CSV or windows.json timestamp (naive, UTC by convention)."""
    return datetime.datetime.fromisoformat(text.strip())


def load_folder(folder: pathlib.Path) -> list[Series]:
    """Every series named in `windows.json`, in the file's order."""
    labels = json.loads((folder / WINDOWS_FILE).read_text())
    return [load_series(folder, name, spans) for name, spans in labels.items()]


def load_series(folder: pathlib.Path, name: str, spans: list[list[str]]) -> Series:
    """One series and its windows, given as `[start, end]` timestamps."""
    timestamps, values = [], []
    with open(folder / name, newline="") as handle:
        # Line 1 is the header: the first row is line 2.
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                timestamps.append(parse_time(row["timestamp"]))
                values.append(float(row["value"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{name}, line {line}: a row needs a timestamp and a number"
                    f" as its value ({exc!r}; the row: {row})"
                ) from None
            if not math.isfinite(values[-1]):
                raise ValueError(f"{name}, line {line}: {values[-1]} is not a number")
    windows = tuple(
        window_rows(timestamps, parse_time(a), parse_time(b), name) for a, b in spans
    )
    return Series(name, tuple(timestamps), tuple(values), windows)


def window_rows(
    timestamps: list[datetime.datetime],
    start: datetime.datetime,
    end: datetime.datetime,
    name: str = "",
) -> tuple[int, int]:
    """The inclusive row range of a window: from the first row at or after
    `start` to the last row at or before `end`, both taken in file order (a
    few series have out-of-order rows, and the window is where the file is)."""
    first = next((i for i, t in enumerate(timestamps) if t >= start), None)
    if first is None or timestamps[first] > end:
        raise ValueError(f"{name}: window [{start}, {end}] holds no row")
    last = first
    for i in range(first, len(timestamps)):
        if timestamps[i] == end:
            return first, i
        if timestamps[i] < end:
            last = i
    return first, last


def reference_scores(folder: pathlib.Path, detector: str, name: str) -> list[float]:
    """A reference detector's per-row scores for series `name`."""
    category, series = name.split("/", 1)
    path = folder / f"reference-{detector}" / category / f"{detector}_{series}"
    with open(path, newline="") as handle:
        return [float(row["anomaly_score"]) for row in csv.DictReader(handle)]
