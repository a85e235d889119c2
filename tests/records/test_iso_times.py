"""`iso_millis` gives what the per-line parser's `_iso_millis` gives.

Every string is also read by `parse._iso_millis` (Python's
`datetime.fromisoformat`): where `iso_millis` gives a time it must be
Python's, and where Python refuses the string it must give null. The common
forms must be admitted, and the forms left to the per-line path must not.
"""

import random
import re

import pyarrow as pa
import pytest

from transforms.records.iso_times import iso_millis
from transforms.records.parse import InvalidRecord, _iso_millis

SEED = 29


def _python_millis(text: str) -> int | None:
    """The per-line parser's ms for `text`, None where it refuses it."""
    try:
        return _iso_millis(text)
    except InvalidRecord:
        return None


def _columnar_millis(texts: list[str]) -> list[int | None]:
    return iso_millis(pa.array(texts, pa.string())).to_pylist()


# Forms the column must convert.
ADMITTED = [
    "2026-01-05T00:00:00",
    "2026-01-05 00:00:00",
    "2026-01-05T00:00:00Z",
    "2026-01-05T00:00:00.065+0000",
    "2026-01-05T00:00:00+00:00",
    "2026-01-05T00:00:00-00:00",
    "2026-01-05T00:00:00+05:30",
    "2026-01-05T00:00:00+0530",
    "2026-01-05T12:34:56-12:00",
    "2026-01-05T12:34:56+23:59",
    "2026-01-05T12:34:56-2359",
    "2026-01-05 12:34:56.5Z",
    "2026-01-05T12:34:56.1",
    "2026-01-05T12:34:56.12",
    "2026-01-05T12:34:56.123",
    "2026-01-05T12:34:56.1234",
    "2026-01-05T12:34:56.12345",
    "2026-01-05T12:34:56.123456",
    "2026-01-05T12:34:56.999999-00:01",
    "2000-02-29T00:00:00",
    "2024-02-29T23:59:59.999Z",
    "2000-01-01T00:00:00Z",
    "2000-01-01T00:30:00+01:00",  # 1999 in UTC
    "1999-12-31T23:30:00-01:00",  # 2000 in UTC
    "2100-01-01T00:00:00Z",
    "2100-01-01T00:00:00.001Z",
    "2099-12-31T23:30:00-00:30",
    "2100-01-01T00:59:00+0100",
    "1969-12-31T23:59:59.9995",  # before the epoch: floored
    "1970-01-01T00:00:00.0005+00:00",
    "1000-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59.999999-23:59",
]

# Forms Python reads, or refuses, that the column leaves to the per-line path.
NOT_ADMITTED = [
    "2026-01-05t00:00:00",
    "2026-01-05T00:00:00z",
    "2026-01-05X00:00:00",
    " 2026-01-05T00:00:00",
    "2026-01-05T00:00:00 ",
    "2026-01-05T00:00:00\t",
    "2026-01-05T00:00:00\n",
    "2026-01-05T00:00:00.1234567",
    "2026-01-05T00:00:00.",
    "2026-01-05T00:00:00,5",
    "2026-01-05T00:00:00+05",
    "2026-01-05T00:00:00+24:00",
    "2026-01-05T00:00:00+2400",
    "2026-01-05T00:00:00-24:00",
    "2026-01-05T00:00:00+00:60",
    "2026-01-05T00:00:00+05:30:15",
    "2026-01-05T00:00:00 +05:30",
    "2026-01-05T00:00:00Z+00:00",
    "2026-01-05T00:00",
    "2026-01-05",
    "2026-W01-1",
    "2026-W01-1T00:00:00",
    "20260105T000000",
    "2026-01-05T000000",
    "2026-02-30T00:00:00",
    "2026-02-29T00:00:00",
    "2100-02-29T00:00:00",
    "1900-02-29T00:00:00",
    "2026-04-31T00:00:00",
    "2026-13-01T00:00:00",
    "2026-00-01T00:00:00",
    "2026-01-00T00:00:00",
    "2026-01-32T00:00:00",
    "2026-01-05T24:00:00",
    "2026-01-05T23:60:00",
    "2026-01-05T23:59:60",
    "0000-01-01T00:00:00",
    "0999-01-01T00:00:00",
    "+2026-01-05T00:00:00",
    "\u0662026-01-05T00:00:00",
    "2026-01-05T00:00:00\u00a0",
    "1700000000000",
    "",
]


def test_common_forms_are_admitted_and_read_as_python_reads_them():
    got = _columnar_millis(ADMITTED)
    assert got == [_python_millis(text) for text in ADMITTED]
    assert None not in got


def test_other_forms_are_left_to_the_per_line_path():
    assert _columnar_millis(NOT_ADMITTED) == [None] * len(NOT_ADMITTED)


@pytest.mark.parametrize("types", [pa.string(), pa.large_string()])
def test_nulls_and_string_types(types):
    texts = pa.array([None, "2026-01-05T00:00:00Z", None], types)
    expected = [None, _python_millis("2026-01-05T00:00:00Z"), None]
    assert iso_millis(texts).to_pylist() == expected
    assert iso_millis(pa.array([], types)).to_pylist() == []


def _field(rng: random.Random, low: int, high: int, beyond: int) -> int:
    """Mostly a value in [low, high], at times one up to `beyond`."""
    return rng.randint(low, high if rng.random() < 0.9 else beyond)


def _random_time(rng: random.Random) -> str:
    """A time of the admitted form, in any of its spellings, its fields at
    times out of range (a day past its month's end is common)."""
    date = (
        f"{rng.randint(1990, 2110):04d}-{_field(rng, 1, 12, 13):02d}"
        f"-{rng.randint(1, 31):02d}"
    )
    clock = ":".join(f"{_field(rng, 0, n, n + 1):02d}" for n in (23, 59, 59))
    fraction = ""
    if rng.random() < 0.6:
        fraction = "." + str(rng.randrange(10**7)).zfill(7)[: rng.randint(1, 6)]
    zone = rng.choice(["", "", "Z", "offset", "offset"])
    if zone == "offset":
        hours, minutes = _field(rng, 0, 23, 24), _field(rng, 0, 59, 60)
        colon = rng.choice([":", ""])
        zone = f"{rng.choice('+-')}{hours:02d}{colon}{minutes:02d}"
    return f"{date}{rng.choice('T ')}{clock}{fraction}{zone}"


CORRUPTIONS = list("0123456789:-+.,TtZz W") + ["\t", "\u00e9", "\u0661", "00"]


def _corrupted(rng: random.Random, text: str) -> str:
    at = rng.randrange(len(text) + 1)
    edit = rng.randrange(3)
    if edit == 0:
        return text[:at] + text[at + 1 :]
    piece = rng.choice(CORRUPTIONS)
    return text[:at] + piece + text[at + (edit == 2) :]


@pytest.mark.parametrize("seed", range(3))
def test_random_times_and_their_corruptions_are_read_as_python_reads_them(seed):
    rng = random.Random(SEED * 100 + seed)
    texts = [_random_time(rng) for _ in range(20000)]
    texts += [_corrupted(rng, rng.choice(texts)) for _ in range(20000)]
    got = _columnar_millis(texts)
    admitted = rejected = 0
    for text, millis in zip(texts, got, strict=True):
        expected = _python_millis(text)
        if millis is None:
            rejected += expected is None
        else:
            assert millis == expected, text
            admitted += 1
    # Both the conversion and the checks that refuse a time were exercised.
    assert admitted > 15000 and rejected > 5000
    # A generated time Python reads is converted unless its zone has
    # minutes over 59, which the admitted form leaves out.
    for text, millis in zip(texts[:20000], got, strict=False):
        readable = _python_millis(text) is not None
        assert (millis is not None) == (readable and not _zone_minutes_over_59(text))


def _zone_minutes_over_59(text: str) -> bool:
    return re.search("[+-][0-9]{2}:?60$", text) is not None
