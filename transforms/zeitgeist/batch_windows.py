"""Window counts of a bounded input, from each query's whole series at once.

`WindowCounter` emits a query's windows from event-time timers, one firing
per window, because in a stream only the watermark can tell a quiet window
from one whose searches are still on the wire. A bounded input read in
batch has no such doubt: every search is in before any timer fires, and the
timers then fire in window order. So the windows `WindowCounter` emits
follow from a query's partial counts and the input's end alone, and
`CountSeries` computes them with one GroupByKey and no state or timers: the
timer firings were most of a batch job's cost (one per window).

The windows are the same, record for record: every window with searches
(or a reported count of zero), and after each such window the zero-count
windows of its activity horizon, never past the window holding the input's
last search (`series_windows`). Nothing is late in batch, so the `late`
output is empty.
"""

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

from transforms.millwheel.event_time import restamped, window_start
from transforms.records.zeitgeist_pb2 import SearchQuery, WindowCount
from transforms.zeitgeist.count_sums import add_counts
from transforms.zeitgeist.params import WindowParams
from transforms.zeitgeist.window_counter import LATE, last_event_time
from transforms.zeitgeist.window_metrics import WindowCounters

# A query's searches summed per window over part of the input (one table of
# `PreCountSearches`, or one deduplicated search): `(key, [(window start,
# count), ...])`. `GroupSeries` gathers a query's parts into its whole series.
PartialSeries = tuple[str, list[tuple[int, int]]]


def series_windows(
    parts: Iterable[Iterable[tuple[int, int]]],
    size_ms: int,
    horizon: int,
    input_end: int,
) -> list[tuple[int, int]]:
    """(window start, count) of every window `WindowCounter` would emit for
    one query, in order, from the `(window start, count)` lists of its
    partial series."""
    counts: dict[int, int] = {}
    for part in parts:
        for start, count in part:
            counts[start] = add_counts(counts.get(start, 0), count)
    starts = set(counts)
    for anchor in counts:
        # A zero-count window shows a dip only while the query is active;
        # past the input's end nothing was observed, so nothing is zero.
        for i in range(1, horizon + 1):
            start = anchor + i * size_ms
            if start > input_end:
                break
            starts.add(start)
    return [(start, counts.get(start, 0)) for start in sorted(starts)]


def series_counts(
    key: str,
    parts: Iterable[Iterable[tuple[int, int]]],
    params: WindowParams,
    input_end: int,
) -> Iterator[WindowCount]:
    """The `WindowCount`s of `series_windows`, in order, each linked to the
    one before, as `WindowCounter` emits them."""
    size = params.size_ms
    previous = None
    horizon = params.activity_horizon_windows
    for start, count in series_windows(parts, size, horizon, input_end):
        # Field by field: upb's constructor takes keywords at a higher cost
        # than setting the same fields (as `model_update` builds its update).
        window = WindowCount()
        window.query = key
        window.window_start = start
        window.window_end = start + size
        window.count = count
        window.revision = 0
        if previous is not None:  # unset on the first window, as None was
            window.previous_window_start = previous
        yield window
        previous = start


class EmitSeries(beam.DoFn):
    """A query's grouped series (`GroupSeries`) to `(query, WindowCount)`s,
    each stamped with its window's last instant (`series_counts`)."""

    def __init__(self, params: WindowParams):
        self._params = params
        self._counted = WindowCounters()

    def process(
        self, element, window=beam.DoFn.WindowParam, *, input_end: int
    ) -> Iterator[Any]:
        key, parts = element
        for counted in series_counts(key, parts, self._params, input_end):
            stamp = self._counted.stamp(counted)
            yield restamped((key, counted), stamp, window)


class GroupSeries(beam.PTransform):
    """`PartialSeries` of a bounded input to `(query, [[(window start,
    count)]])`: one element per query, the lists of its whole series
    (unordered, a window possibly in several)."""

    def expand(self, parts):
        if not parts.is_bounded:
            raise ValueError(
                "A query's whole series is known in batch only; "
                "use CountWindows in streaming"
            )
        return parts | "Series" >> beam.GroupByKey()


class SearchesAsSeries(beam.PTransform):
    """`(query, SearchQuery)` searches or partial counts to `PartialSeries`
    of one window each, for `GroupSeries`."""

    def __init__(self, size_ms: int):
        super().__init__()
        self._size_ms = size_ms

    def expand(self, searches):
        size = self._size_ms
        return searches | "AsSeries" >> beam.MapTuple(
            lambda key, search: (
                key,
                [(window_start(search.event_time, size), search.count)],
            )
        ).with_output_types(PartialSeries)


def input_end(latest_event_times: beam.PCollection) -> beam.pvalue.AsSingleton:
    """The input's last search, as a side input, from event times whose
    maximum it is (partial series are stamped with their earliest search)."""
    return beam.pvalue.AsSingleton(
        latest_event_times | "Latest" >> beam.CombineGlobally(last_event_time)
    )


class CountSeries(beam.PTransform):
    """`CountWindows` for a bounded input: `PartialSeries` to `(query,
    WindowCount)`, plus an empty `late` output.

    `latest_event_times` holds event times whose maximum is the input's last
    search (the partial series are stamped with their earliest).
    """

    def __init__(self, params: WindowParams, latest_event_times: beam.PCollection):
        super().__init__()
        self._params = params
        self._latest_event_times = latest_event_times

    def expand(self, parts):
        end = input_end(self._latest_event_times)
        return (
            parts
            | "Group" >> GroupSeries()
            | "Windows"
            >> beam.ParDo(EmitSeries(self._params), input_end=end)
            .with_output_types(tuple[str, WindowCount], **{LATE: SearchQuery})
            .with_outputs(LATE, main="windows")
        )
