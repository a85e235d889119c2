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
    "^[1-9][0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    "[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    "(?:\\.[0-9]{1,6})?"
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):?[0-5][0-9])?$"
)

_US_PER_S = 1_000_000
_US_PER_MS = 1000
_FRACTION_DIGITS = 6
# Where the fixed-width fields start: YYYY-MM-DDTHH:MM:SS, then the rest.
_YEAR, _MONTH, _DAY, _HOUR, _MINUTE, _SECOND, _REST = 0, 5, 8, 11, 14, 17, 19
# Days of the year before each month's first, in a common year.
_DAYS_BEFORE_MONTH = np.cumsum([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30])
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def iso_millis(times: pa.Array) -> pa.Array:
    """Epoch milliseconds (int64) of the strings of `times` that are of the
    `ISO_TIME` form and a real date; null for all others."""
    admitted = pc.fill_null(pc.match_substring_regex(times, ISO_TIME), False)
    rows = np.flatnonzero(admitted.to_numpy(zero_copy_only=False))
    chars = _Chars(times.take(rows))
    zone = _zone_length(chars)
    year, month, day = chars.number(_YEAR, 4), chars.number(_MONTH), chars.number(_DAY)
    seconds = (
        _days_since_epoch(year, month, day) * 86400
        + chars.number(_HOUR) * 3600
        + chars.number(_MINUTE) * 60
        + chars.number(_SECOND)
        - _offset_seconds(chars, zone)
    )
    # Python floors the microseconds to whole ms, as numpy's `//` does.
    micros = seconds * _US_PER_S + _fraction_micros(chars, zone)
    millis = np.zeros(len(times), np.int64)
    millis[rows] = micros // _US_PER_MS
    valid = np.zeros(len(times), bool)
    valid[rows] = day <= _days_in_month(year, month)
    return pa.array(millis, pa.int64(), mask=~valid)


class _Chars:
    """The bytes of an array of ASCII strings, addressed from each string's
    start or end (each string is of the `ISO_TIME` form)."""

    def __init__(self, texts: pa.Array) -> None:
        _, offsets, data = texts.buffers()
        kind = np.int64 if pa.types.is_large_string(texts.type) else np.int32
        bounds = np.frombuffer(offsets, kind)[
            texts.offset : texts.offset + len(texts) + 1
        ]
        self.data = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
        self.starts = bounds[:-1].astype(np.int64)
        self.ends = bounds[1:].astype(np.int64)

    def number(self, at: int, width: int = 2) -> np.ndarray:
        """The `width` digits from `at` in each string, as integers."""
        return self.digits_at(self.starts + at, width)

    def digits_at(self, where: np.ndarray, width: int) -> np.ndarray:
        value = np.zeros(len(where), np.int64)
        for i in range(width):
            value = value * 10 + self.data[where + i] - ord("0")
        return value

    def byte_at(self, where: np.ndarray) -> np.ndarray:
        return self.data[where]


def _zone_length(chars: _Chars) -> np.ndarray:
    """The length of each string's zone: 6 for "+HH:MM", 5 for "+HHMM", 1
    for "Z", 0 for none. In the `ISO_TIME` form a sign is never among the
    last 6 characters but as a zone's first."""
    return np.select(
        [
            _is_sign(chars.byte_at(chars.ends - 6)),
            _is_sign(chars.byte_at(chars.ends - 5)),
            chars.byte_at(chars.ends - 1) == ord("Z"),
        ],
        [6, 5, 1],
        0,
    )


def _is_sign(byte: np.ndarray) -> np.ndarray:
    return (byte == ord("+")) | (byte == ord("-"))


def _offset_seconds(chars: _Chars, zone: np.ndarray) -> np.ndarray:
    """The offset east of UTC in seconds of each string's zone of length
    `zone` (0 for "Z" or none): its hours follow the sign, its minutes end
    the string."""
    has_offset = zone >= 5
    # Without an offset, the string's start is read instead, and dropped.
    sign = np.where(has_offset, chars.ends - zone, chars.starts)
    east = chars.digits_at(sign + 1, 2) * 3600 + chars.digits_at(chars.ends - 2, 2) * 60
    east = np.where(has_offset, east, 0)
    return np.where(chars.byte_at(sign) == ord("-"), -east, east)


def _fraction_micros(chars: _Chars, zone: np.ndarray) -> np.ndarray:
    """The fraction of a second after "." as microseconds (0 if none), its
    1 to 6 digits padded with zeros to 6, in strings whose zones have
    lengths `zone`."""
    after_seconds = chars.ends - chars.starts - _REST - zone
    digits = np.maximum(after_seconds - 1, 0)  # less the "."
    micros = np.zeros(len(digits), np.int64)
    for i in range(_FRACTION_DIGITS):
        # Past a string's digits, its start is read instead, and dropped.
        at = np.where(i < digits, chars.starts + _REST + 1 + i, chars.starts)
        digit = np.where(i < digits, chars.byte_at(at) - ord("0"), 0)
        micros = micros * 10 + digit
    return micros


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
