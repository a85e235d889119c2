"""MillWheel's injector watermark for a followed directory.

The estimate is the newest event time read less a disorder bound, and the
newest event time itself once the input has been idle for a timeout. Its
state travels with the source's remainder, so a restart resumes it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol

from apache_beam.io.iobase import WatermarkEstimator
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

from transforms.millwheel.event_time import to_millis, to_timestamp

_NO_EVENT_MS = to_millis(MIN_TIMESTAMP)


class WatermarkSettings(Protocol):
    """What the estimate needs of a source's settings (`FollowSettings`)."""

    max_disorder_seconds: float
    idle_timeout_seconds: float  # 0: the watermark never jumps ahead


@dataclasses.dataclass(frozen=True)
class InjectorState:
    """A followed directory's watermark estimate, carried by its remainder.

    Times are event-time milliseconds; `last_record_s` is the wall clock
    (seconds) when the newest event time was read, or a file last waited to
    be read (see `InjectorWatermark.input_pending`). `observed_all` says
    that `newest_ms` has seen every record of the files read: a state
    checkpointed before 2026-11-27 may have missed the last records of a
    file that a runner's checkpoint cut (`FollowedFilesTracker`), and is
    read with it False, until the source has read those files again.
    """

    watermark_ms: int = _NO_EVENT_MS
    newest_ms: int = _NO_EVENT_MS
    last_record_s: float = 0.0
    observed_all: bool = True

    def __setstate__(self, state: dict) -> None:
        # A state pickled before `observed_all` existed lacks it.
        self.__dict__.update({"observed_all": False, **state})


class InjectorWatermark(WatermarkEstimator):
    """The newest event time read less the disorder bound; the newest event
    time itself once the input has been idle for the timeout. Monotonic."""

    def __init__(self, state: InjectorState, settings: WatermarkSettings) -> None:
        self._state = state
        self._disorder_ms = int(settings.max_disorder_seconds * 1000)
        self._idle_s = settings.idle_timeout_seconds

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        # Dead letters keep the impulse's timestamp, the minimum: they say
        # nothing of event time.
        event_ms = to_millis(timestamp)
        if event_ms > self._state.newest_ms:
            self._state = dataclasses.replace(
                self._state, newest_ms=event_ms, last_record_s=time.time()
            )

    def observed_all(self) -> bool:
        """Whether the newest event time has seen every record of the files
        read (see `InjectorState`)."""
        return self._state.observed_all

    def observe_again(self, newest: Timestamp | None) -> None:
        """The newest event time of the files read, read again for a state
        that had not seen them all (None: none left to read)."""
        if newest is not None:
            self.observe_timestamp(newest)
        self._state = dataclasses.replace(self._state, observed_all=True)

    def input_pending(self) -> None:
        """A file is known but not read yet: its records are in flight, so
        the input is not idle, however long ago the newest event came."""
        self._state = dataclasses.replace(self._state, last_record_s=time.time())

    def current_watermark(self) -> Timestamp:
        state = self._state
        if state.newest_ms == _NO_EVENT_MS:
            return MIN_TIMESTAMP
        estimate = state.newest_ms - self._disorder_ms
        idle = self._idle_s and time.time() - state.last_record_s >= self._idle_s
        if idle:
            estimate = state.newest_ms
        if estimate > state.watermark_ms:
            self._state = dataclasses.replace(state, watermark_ms=estimate)
        return to_timestamp(self._state.watermark_ms)

    def get_estimator_state(self) -> InjectorState:
        self.current_watermark()
        return self._state
