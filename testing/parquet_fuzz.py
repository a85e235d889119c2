"""The Parquet part of the fuzz corpus (see `testing.record_fuzz`).

Each file has a schema of its own: the click columns with the right types,
with wrong ones (numbers for ids, lists and structs and binary for times,
floats with NaN and infinities, timestamps Python cannot hold), or missing;
every row is labelled good or bad when it is made. Some files are not
Parquet at all, or are cut off, and must each be one unreadable file.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pathlib
import random
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from testing.record_fuzz import T0, Corpus

_NS = 1_000_000
# An event time column: (arrow type, make a good value, make a bad value).
# A None maker means the type has no good (or no bad) value.
_TimeColumn = tuple[pa.DataType, Callable | None, Callable | None]
_TIME_COLUMNS: dict[str, _TimeColumn] = {
    "int64": (
        pa.int64(),
        lambda rng, i: T0 + i,
        lambda rng, i: rng.choice([1, -(2**63), 2**63 - 1, 1_767_571_200]),
    ),
    "float64": (
        pa.float64(),
        lambda rng, i: float(T0 + i),
        lambda rng, i: (
            rng.choice([float("nan"), float("inf"), -float("inf"), 1e300])
            if i % 2
            else T0 + 0.5
        ),
    ),
    "string": (
        pa.string(),
        lambda rng, i: "2026-01-05T00:00:00Z",
        lambda rng, i: rng.choice(["", "NaN", "1e400", "9" * 5000, "\u0000", "x"]),
    ),
    "timestamp_ns": (
        pa.timestamp("ns"),
        lambda rng, i: (T0 + i) * _NS,
        lambda rng, i: (T0 + i) * _NS + rng.randrange(1, 1000),  # sub-microsecond
    ),
    "timestamp_s": (
        pa.timestamp("s", tz="UTC"),
        lambda rng, i: T0 // 1000 + i,
        lambda rng, i: rng.choice([300_000_000_000, -100_000_000_000, 0]),
    ),
    "date32": (pa.date32(), None, lambda rng, i: rng.randrange(0, 30_000)),
    "bool": (pa.bool_(), None, lambda rng, i: bool(i % 2)),
    "binary": (pa.binary(), None, lambda rng, i: rng.randbytes(8)),
    "list": (pa.list_(pa.int64()), None, lambda rng, i: [T0, T0]),
    "struct": (
        pa.struct([("ms", pa.int64())]),
        None,
        lambda rng, i: {"ms": T0},
    ),
    "decimal": (
        pa.decimal128(38, 3),
        None,
        lambda rng, i: decimal.Decimal(T0) + decimal.Decimal("0.5"),
    ),
    "duration_ns": (pa.duration("ns"), None, lambda rng, i: rng.randrange(1, 10**9)),
    "time64_ns": (pa.time64("ns"), None, lambda rng, i: rng.randrange(1, 10**9)),
}
# A click id column: (arrow type, whether it can hold a good id, bad value).
_ID_COLUMNS = {
    "string": (pa.string(), True, lambda rng, i: rng.choice(["", " "])),
    "large_string": (pa.large_string(), True, lambda rng, i: None),
    "int64": (pa.int64(), False, lambda rng, i: i),
    "binary": (pa.binary(), False, lambda rng, i: b"id"),
    "list": (pa.list_(pa.string()), False, lambda rng, i: ["a", "b"]),
}


def write_parquet(corpus: Corpus, folder: pathlib.Path, rng: random.Random) -> None:
    """Mixed files of every column type pair, then files that are not
    Parquet."""
    folder.mkdir(parents=True)
    n = 0
    for time_kind in sorted(_TIME_COLUMNS):
        for id_kind in sorted(_ID_COLUMNS):
            _mixed_file(corpus, folder / f"p{n}.parquet", rng, time_kind, id_kind)
            n += 1
    _missing_column(corpus, folder / "missing.parquet")
    for m in range(40):
        _broken_file(corpus, folder / f"broken-{m}.parquet", rng, m)


def _mixed_file(
    corpus: Corpus,
    path: pathlib.Path,
    rng: random.Random,
    time_kind: str,
    id_kind: str,
) -> None:
    time_type, good_time, bad_time = _TIME_COLUMNS[time_kind]
    id_type, can_be_good, bad_id = _ID_COLUMNS[id_kind]
    ids, times, good = [], [], []
    for i in range(30):
        is_good = good_time is not None and can_be_good and rng.random() < 0.5
        wrong_id = not can_be_good or (not is_good and rng.random() < 0.3)
        wrong_time = not is_good and (not wrong_id or good_time is None)
        ids.append(bad_id(rng, i) if wrong_id else f"{path.stem}-{i}")
        times.append(bad_time(rng, i) if wrong_time else good_time(rng, i))
        good.append(is_good)
    table = pa.table(
        {
            "click_id": pa.array(ids, type=id_type),
            "query_id": pa.array([f"q{i % 7}" for i in range(30)]),
            "event_time": pa.array(times, type=time_type),
            "extra": pa.array([{"n": [i]} for i in range(30)]),  # ignored
        }
    )
    # Small row groups: several parts per file, as a large file has.
    pq.write_table(table, path, row_group_size=rng.choice([7, 30]))
    for row, (click_id, is_good) in enumerate(zip(ids, good, strict=True), start=1):
        if is_good:
            corpus.good.append(click_id)
        else:
            corpus.dead.add((str(path), f"row {row}"))
            corpus.count(f"parquet_{time_kind}_time_{id_kind}_id")


def _missing_column(corpus: Corpus, path: pathlib.Path) -> None:
    table = pa.table({"click_id": ["a", "b"], "query_id": ["q", "q"]})
    pq.write_table(table, path)
    for row in (1, 2):
        corpus.dead.add((str(path), f"row {row}"))
        corpus.count("parquet_missing_column")


def _broken_file(
    corpus: Corpus, path: pathlib.Path, rng: random.Random, m: int
) -> None:
    """A file that is not readable Parquet: garbage, empty, or cut short."""
    table = pa.table(
        {
            "click_id": [f"lost-{m}-{i}" for i in range(50)],
            "query_id": ["q"] * 50,
            "event_time": pa.array(
                [dt.datetime(2026, 1, 5, tzinfo=dt.UTC)] * 50, type=pa.timestamp("ms")
            ),
        }
    )
    kind = ("garbage", "empty", "cut", "magic_only")[m % 4]
    if kind == "garbage":
        data = rng.randbytes(rng.randrange(1, 2000))
    elif kind == "empty":
        data = b""
    elif kind == "magic_only":
        data = b"PAR1" + rng.randbytes(rng.randrange(0, 100)) + b"PAR1"
    else:
        pq.write_table(table, path)
        whole = path.read_bytes()
        data = whole[: rng.randrange(1, len(whole) - 8)]
    path.write_bytes(data)
    corpus.unreadable.add(str(path))
    corpus.count(f"parquet_file_{kind}")
