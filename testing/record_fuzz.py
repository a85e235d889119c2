"""A seeded corpus of malformed record files, with the truth of every line.

`write_jsonl`, `write_csv`, `write_gz` and `testing.parquet_fuzz`'s
`write_parquet` write click logs in every format the readers take, each
mixing good records with malformed ones, plus whole files that are damaged,
into a `Corpus` that records which click ids must come out as
records (each exactly once), and which (file, location) must come out as a
dead letter. Nothing here calls the readers or the parsers: a line is bad
because it was made bad, so the truth does not depend on the code under test.

- `jsonl/`: binary garbage, invalid UTF-8, NaN and infinities, huge and
  very long numbers, deep nesting, huge lines, wrong types, lone
  surrogates, cut-off JSON, control characters, times out of range.
- `csv/`: the same kinds of values as CSV, wrong column counts, bad
  quoting, and files whose header is garbage (every row is then bad).
- `gz/`: JSON Lines files gzipped whole, as concatenated members, cut off
  at a random byte (the whole lines before the cut are owed), overwritten
  with garbage in the middle (nothing is owed, see `Corpus`), or not gzip.
- `parquet/` (`testing.parquet_fuzz`): wrong column types and schemas,
  unrepresentable timestamps, and files that are not Parquet.

`Corpus.bad` counts malformed records and damaged files; a file cut off
after some good lines still owes those lines as records.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z
MAX_LINE_BYTES = 4096  # the readers' limit in the fuzz tests: huge is above it
CSV_HEADER = b"click_id,query_id,event_time"


@dataclass
class Corpus:
    """What the readers must make of the corpus."""

    good: list[str] = field(default_factory=list)  # click ids, each once
    # (file path, "line N" / "row N") of each record that must be dead.
    dead: set[tuple[str, str]] = field(default_factory=set)
    # Files that must yield exactly one unreadable_file dead letter.
    unreadable: set[str] = field(default_factory=set)
    # Ids of the good records in gzip files damaged mid-stream. Damage that
    # leaves the stream looking cut short cannot be told from a truncated
    # file, whose lines before the cut are used: records of such a file may
    # come out, even altered or repeated by the damage (gzip's CRC is at the
    # end), and none is owed.
    corrupt_prefixes: set[str] = field(default_factory=set)
    kinds: dict[str, int] = field(default_factory=dict)  # bad items by kind

    def count(self, kind: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1

    @property
    def bad(self) -> int:
        return sum(self.kinds.values())


class _Lines:
    """Builds one text file's lines, recording the truth of each."""

    def __init__(self, corpus: Corpus, path: pathlib.Path) -> None:
        self.corpus = corpus
        self.path = str(path)
        self.lines: list[bytes] = []
        self.good: list[tuple[int, str]] = []  # (line number, click id)

    def add_good(self, line: bytes, click_id: str) -> None:
        self.lines.append(line)
        self.good.append((len(self.lines), click_id))

    def add_bad(self, record: bytes, kind: str) -> None:
        """A malformed record: one line, or several if a quoted field of
        it holds a line break, each line of it then dead."""
        for line in record.split(b"\n"):
            assert line.strip(), (kind, record[:80])
            self.lines.append(line)
            self.corpus.dead.add((self.path, f"line {len(self.lines)}"))
        self.corpus.count(kind)

    def data(self) -> bytes:
        return b"".join(line + b"\n" for line in self.lines)

    def owe_all(self) -> None:
        self.corpus.good.extend(click_id for _, click_id in self.good)


def _garbage(rng: random.Random, size: int) -> bytes:
    raw = bytes(rng.randrange(256) for _ in range(size)).replace(b"\n", b"?")
    return b"#" + raw  # never blank, never a record


def _good_json(rng: random.Random, click_id: str, i: int) -> bytes:
    """A valid click, in one of the unusual but legal forms."""
    record: dict = {"click_id": click_id, "query_id": f"q{i % 50}"}
    form = i % 5
    if form == 0:
        record["event_time"] = T0 + i
    elif form == 1:
        record["event_time"] = f" {T0 + i} "  # a decimal string
    elif form == 2:
        record["event_time"] = "2026-01-05T05:30:00+05:30"  # ISO with offset
    elif form == 3:
        record["event_time"] = float(T0 + i)  # a whole float
        record["extra"] = {"nested": [1, {"deep": None}]}  # ignored
    else:
        record["event_time"] = T0 + i
        record["record_id"] = "r\u00e9\U0001f600"  # non-ASCII is fine
    return json.dumps(record, ensure_ascii=rng.random() < 0.5).encode()


def _click(event_time: object, click_id: object = "x", query_id: object = "q") -> dict:
    return {"click_id": click_id, "query_id": query_id, "event_time": event_time}


def _json(value: object) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


# Each maker gives one malformed JSON line (no newline, not blank).
_JSON_BAD: dict[str, Callable[[random.Random], bytes]] = {
    "garbage": lambda rng: _garbage(rng, rng.randrange(1, 200)),
    "invalid_utf8": lambda rng: (
        b'{"click_id": "\xff\xfe'
        + _garbage(rng, 3)[1:]
        + b'", "query_id": "q", "event_time": 1767571200000}'
    ),
    "nan": lambda rng: _json(_click(float("nan"))),
    "infinity": lambda rng: _json(_click(rng.choice([1, -1]) * float("inf"))),
    "huge_float": lambda rng: _json(_click(0)).replace(b"0}", b"1e400}"),
    "long_integer": lambda rng: (
        _json(_click(0)).replace(
            b"0}", str(rng.randrange(1, 9)).encode() * rng.choice([20, 5000])
        )
        + b"}"
    ),
    "int64_overflow": lambda rng: _json(_click(2**64 + rng.randrange(10**6))),
    "deep_nesting": lambda rng: (
        b"[" * rng.choice([1000, 100_000]) + b"]" * rng.choice([0, 1000])
    ),
    "deep_object": lambda rng: b'{"click_id": ' + b'{"a": ' * 50_000 + b"1",
    "huge_line": lambda rng: _json(_click(T0, "x" * (MAX_LINE_BYTES + 1))),
    "wrong_type_id": lambda rng: _json(_click(T0, rng.choice([5, True, [], {}]))),
    "null_id": lambda rng: _json(_click(T0, None)),
    "blank_id": lambda rng: _json(_click(T0, " \t ")),
    "missing_query": lambda rng: _json({"click_id": "x", "event_time": T0}),
    "wrong_type_time": lambda rng: _json(_click(rng.choice(["", "soon", True, []]))),
    "time_out_of_range": lambda rng: _json(_click(rng.choice([1, 1_767_571_200]))),
    "lone_surrogate": lambda rng: (
        b'{"click_id": "\\ud800", "query_id": "q", "event_time": 1767571200000}'
    ),
    "cut_off": lambda rng: _json(_click(T0))[: rng.randrange(1, 40)],
    "not_an_object": lambda rng: rng.choice([b"5", b'"s"', b"[1, 2]", b"null"]),
    "control_char": lambda rng: (
        b'{"click_id": "a\x00b", "query_id": "q", "event_time": 1767571200000}'
    ),
    "bom_mid_file": lambda rng: b"\xef\xbb\xbf" + _json(_click(T0)),
    "iso_garbage": lambda rng: _json(_click("2026-13-45T99:99:99Z")),
}

_CSV_BAD: dict[str, Callable[[random.Random], bytes]] = {
    # Without quotes, lest a quoted field it left open take the next lines.
    "garbage": lambda rng: _garbage(rng, rng.randrange(1, 200)).replace(b'"', b"'"),
    "invalid_utf8": lambda rng: b"\xff\xfeid,q,1767571200000",
    "too_many_columns": lambda rng: b"a,q,1767571200000,extra",
    "too_few_columns": lambda rng: b"a,1767571200000",
    # The readers take one record a line: a quoted field may not hold a
    # line break, and the lines up to the one that closes it are not rows.
    "line_break_in_quotes": lambda rng: b'"a,q,1767571200000\nb",q,1767571200000',
    "text_after_quote": lambda rng: b'"a"b,q,1767571200000',
    "nan": lambda rng: rng.choice([b"a,q,NaN", b"a,q,nan", b"a,q,inf", b"a,q,-inf"]),
    "huge_number": lambda rng: rng.choice([b"a,q,1e400", b"a,q," + b"9" * 5000]),
    "blank_id": lambda rng: b" ,q,1767571200000",
    "time_out_of_range": lambda rng: b"a,q,1767571200",
    "huge_line": lambda rng: b"a" * (MAX_LINE_BYTES + 1) + b",q,1767571200000",
    "iso_garbage": lambda rng: b"a,q,2026-02-30T00:00:00",
}


def _good_csv(click_id: str, i: int) -> tuple[bytes, str]:
    time = f"{T0 + i}" if i % 2 else "2026-01-05T00:00:01Z"
    quoted = f'"{click_id}, with comma"' if i % 3 == 0 else click_id
    owed = f"{click_id}, with comma" if i % 3 == 0 else click_id
    return f"{quoted},q{i % 50},{time}".encode(), owed


def _mixed_file(
    corpus: Corpus,
    path: pathlib.Path,
    rng: random.Random,
    makers: dict[str, Callable[[random.Random], bytes]],
    good: Callable[[int], tuple[bytes, str]],
    lines: int,
    header: bytes | None = None,
) -> _Lines:
    text = _Lines(corpus, path)
    if header is not None:
        text.lines.append(header)
    kinds = sorted(makers)
    for i in range(lines):
        # The first line is good: a byte-order mark there is no error.
        if i == 0 or rng.random() < 0.5:
            line, click_id = good(i)
            text.add_good(line, click_id)
        else:
            kind = kinds[rng.randrange(len(kinds))]
            text.add_bad(makers[kind](rng), kind)
    return text


def write_jsonl(corpus: Corpus, folder: pathlib.Path, rng: random.Random) -> None:
    folder.mkdir(parents=True)
    for n in range(4):
        path = folder / f"clicks-{n}.jsonl"
        text = _mixed_file(
            corpus,
            path,
            rng,
            _JSON_BAD,
            lambda i, n=n: _jsonl_good(rng, f"jsonl-{n}-{i}", i),
            600,
        )
        path.write_bytes(text.data())
        text.owe_all()


def _jsonl_good(rng: random.Random, click_id: str, i: int) -> tuple[bytes, str]:
    return _good_json(rng, click_id, i), click_id


def write_csv(corpus: Corpus, folder: pathlib.Path, rng: random.Random) -> None:
    folder.mkdir(parents=True)
    for n in range(4):
        path = folder / f"clicks-{n}.csv"
        text = _mixed_file(
            corpus,
            path,
            rng,
            _CSV_BAD,
            lambda i, n=n: _good_csv(f"csv-{n}-{i}", i),
            500,
            header=CSV_HEADER,
        )
        path.write_bytes(text.data())
        text.owe_all()
    for n in range(3):  # a garbage header: no row can be read
        path = folder / f"headless-{n}.csv"
        text = _Lines(corpus, path)
        text.add_bad(_garbage(rng, 50), "garbage_header")
        for i in range(20):
            line, _ = _good_csv(f"unreadable-{n}-{i}", i)
            text.add_bad(line, "row_without_header")
        path.write_bytes(text.data())


def write_gz(corpus: Corpus, folder: pathlib.Path, rng: random.Random) -> None:
    """JSON Lines files, gzipped, most of them damaged on purpose."""
    folder.mkdir(parents=True)
    damages = ("intact", "members", "truncated", "corrupt", "not_gzip", "header_cut")
    for n in range(300):
        damage = damages[n % len(damages)]
        path = folder / f"clicks-{n}.jsonl.gz"
        text = _mixed_file(
            corpus,
            path,
            rng,
            _JSON_BAD,
            lambda i, n=n: _jsonl_good(rng, f"gz-{n}-{i}", i),
            rng.randrange(1, 40),
        )
        data = text.data()
        if damage == "intact":
            path.write_bytes(gzip.compress(data))
            text.owe_all()
        elif damage == "members":
            half = len(data) // 2
            path.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
            text.owe_all()
        else:
            _damaged(corpus, text, damage, data, rng)


def _damaged(
    corpus: Corpus, text: _Lines, damage: str, data: bytes, rng: random.Random
) -> None:
    """Writes `text` damaged as `damage`; only what survives is owed."""
    path, whole = text.path, gzip.compress(data)
    corpus.unreadable.add(path)
    corpus.count(f"gz_{damage}")
    lost = {f"line {number}" for number in range(1, len(text.lines) + 1)}
    if damage == "truncated":
        cut = whole[: rng.randrange(11, len(whole) - 8)]
        pathlib.Path(path).write_bytes(cut)
        # What survives, by zlib itself: whole lines before the cut.
        readable = zlib.decompressobj(31).decompress(cut)
        whole_lines = readable.count(b"\n")
        corpus.good.extend(c for number, c in text.good if number <= whole_lines)
        lost = {f"line {n}" for n in range(whole_lines + 1, len(text.lines) + 1)}
    elif damage == "corrupt":
        corpus.corrupt_prefixes.add(text.good[0][1].rsplit("-", 1)[0] + "-")
        start = rng.randrange(10, len(whole) - 1)
        size = rng.randrange(1, 16)
        pathlib.Path(path).write_bytes(
            whole[:start] + _garbage(rng, size) + whole[start + size + 1 :]
        )
    elif damage == "not_gzip":
        pathlib.Path(path).write_bytes(_garbage(rng, rng.randrange(1, 500)))
    else:  # header_cut
        pathlib.Path(path).write_bytes(whole[: rng.randrange(1, 10)])
    # Bad lines past the damage are not owed as dead letters: the file's
    # unreadable_file letter stands for everything it could not read.
    corpus.dead -= {(path, location) for location in lost}
