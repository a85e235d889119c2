"""ISO-8601 times converted to epoch milliseconds over a whole Arrow column.

`iso_millis` gives, for each string of one common, plainly written form
(`ISO_TIME`), what the per-line parser's `parse._iso_millis` gives for it
(`datetime.fromisoformat`, a naive time read as UTC, then whole
milliseconds since the epoch, floored), and null for every other string.
The admitted form is

    YYYY-MM-DD, "T" or " ", HH:MM:SS, optionally "." and 1 to 6 digits,
    optionally a zone: "Z", or "+"/"-" then HH:MM or HHMM

in ASCII digits, without surrounding whitespace, with a year of 1000 to
9999, a month of 01-12, a day of 01-31, an hour of 00-23, minutes and
seconds of 00-59, and a zone of at most 23:59 hours either way. Python
(3.11) reads every such string (but a day past its month's end) as those
fields say: the fraction is a decimal fraction of a second, padded to
microseconds; "Z", "+00:00", "-00:00" and "+0000" are UTC; an offset is
subtracted from the local time. So the conversion is exact integer
arithmetic on those fields, and a day past its month's end (Gregorian leap
years) is null, where Python refuses it. Python also reads forms left out
here (other separators, 7 or more fraction digits, zones of seconds, of
minutes over 59, of hours alone, week dates, compact dates, a time without
seconds): those are null, for the caller to read one at a time.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ISO_TIME = (
    "^(?P<year>[1-9][0-9]{3})-(?P<month>0[1-9]|1[0-2])"
    "-(?P<day>0[1-9]|[12][0-9]|3[01])"
    "[T ](?P<hour>[01][0-9]|2[0-3]):(?P<minute>[0-5][0-9]):(?P<second>[0-5][0-9])"
    "(?:\\.(?P<fraction>[0-9]{1,6}))?"
    "(?:Z|(?P<sign>[+-])(?P<offset_hours>[01][0-9]|2[0-3]):?"
    "(?P<offset_minutes>[0-5][0-9]))?$"
)

_US_PER_S = 1_000_000
_US_PER_MS = 1000
# Days of the year before each month's first, in a common year.
_DAYS_BEFORE_MONTH = np.cumsum([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30])
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def iso_millis(times: pa.Array) -> pa.Array:
    """Epoch milliseconds (int64) of the strings of `times` that are of the
    `ISO_TIME` form and a real date; null for all others."""
    admitted = pc.fill_null(pc.match_substring_regex(times, ISO_TIME), False)
    rows = np.flatnonzero(admitted.to_numpy(zero_copy_only=False))
    parts = pc.extract_regex(times.take(rows), ISO_TIME)
    year = _digits(parts, "year", 4)
    month, day = _digits(parts, "month", 2), _digits(parts, "day", 2)
    real = day <= _days_in_month(year, month)
    seconds = (
        _days_since_epoch(year, month, day) * 86400
        + _digits(parts, "hour", 2) * 3600
        + _digits(parts, "minute", 2) * 60
        + _digits(parts, "second", 2)
        - _offset_seconds(parts)
    )
    # Python floors the microseconds to whole ms, as numpy's `//` does.
    micros = seconds * _US_PER_S + _digits(parts, "fraction", 6)
    millis = np.zeros(len(times), np.int64)
    millis[rows] = micros // _US_PER_MS
    valid = np.zeros(len(times), bool)
    valid[rows] = real
    return pa.array(millis, pa.int64(), mask=~valid)


def _digits(parts: pa.StructArray, name: str, width: int) -> np.ndarray:
    """A group of `ISO_TIME`'s matches as integers, its digits right-padded
    with zeros to `width`: a fraction so becomes microseconds, and a group
    that matched nothing 0."""
    text = pc.utf8_rpad(pc.struct_field(parts, name), width, "0")
    return text.cast(pa.int64()).to_numpy()


def _offset_seconds(parts: pa.StructArray) -> np.ndarray:
    """The zone's offset east of UTC in seconds (0 for "Z" or none)."""
    east = (
        _digits(parts, "offset_hours", 2) * 3600
        + _digits(parts, "offset_minutes", 2) * 60
    )
    west = pc.equal(pc.struct_field(parts, "sign"), "-").to_numpy(zero_copy_only=False)
    return np.where(west, -east, east)


def _is_leap(year: np.ndarray) -> np.ndarray:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def _days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    return _DAYS_IN_MONTH[month - 1] + ((month == 2) & _is_leap(year))


def _days_since_epoch(year: np.ndarray, month: np.ndarray, day: np.ndarray):
    """Days from 1970-01-01 to each date of the proleptic Gregorian calendar."""
    return (
        _days_before_year(year)
        - _days_before_year(1970)
        + _day_of_year(year, month, day)
    )


def _days_before_year(year):
    """Days from 0001-01-01 to the first of `year` (year >= 1)."""
    past = year - 1
    return past * 365 + past // 4 - past // 100 + past // 400


def _day_of_year(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days from the first of `year` to the date."""
    leap_day = (month > 2) & _is_leap(year)
    return _DAYS_BEFORE_MONTH[month - 1] + leap_day + day - 1
