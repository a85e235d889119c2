"""The metrics of the windows a query's counter emits, on every path."""

from apache_beam.metrics import Metrics
from apache_beam.utils.timestamp import Timestamp

from transforms.millwheel.event_time import last_instant
from transforms.records.zeitgeist_pb2 import WindowCount
from transforms.zeitgeist.count_sums import MAX_COUNT
from transforms.zeitgeist.metrics import METRICS_NAMESPACE


class WindowCounters:
    """The metrics of the windows a counter emits, on every path."""

    def __init__(self) -> None:
        self._emitted = Metrics.counter(METRICS_NAMESPACE, "windows_emitted")
        self._zero = Metrics.counter(METRICS_NAMESPACE, "zero_windows_emitted")
        self._saturated = Metrics.counter(METRICS_NAMESPACE, "window_counts_saturated")

    def count(self, window: WindowCount) -> None:
        """Count `window` as emitted."""
        self._emitted.inc()
        if not window.count:
            self._zero.inc()
        self.count_saturated(window.count)

    def count_saturated(self, count: int) -> None:
        """Count a window emitted, or corrected, to `MAX_COUNT`."""
        if count == MAX_COUNT:
            self._saturated.inc()

    def stamp(self, window: WindowCount) -> Timestamp:
        """Count `window` as emitted; return the timestamp it is emitted
        with, its last instant."""
        self.count(window)
        return last_instant(window.window_end)
