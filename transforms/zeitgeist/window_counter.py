"""Counting searches per query per event-time window, emitted on the watermark.

`WindowCounter` is MillWheel's Windower (figure 1 of the paper): a stateful
DoFn keyed by query that keeps a bucket of counts per window and emits each
window once the low watermark passes its end. Dips are the absence of data,
so while a query is active the counter also emits zero-count windows: only the
watermark can tell "no searches" from "searches still on the wire".
"""

from typing import NamedTuple

import apache_beam as beam
from apache_beam.coders import (
    BytesCoder,
    MapCoder,
    NullableCoder,
    TupleCoder,
    VarIntCoder,
)
from apache_beam.metrics import Metrics
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.windowed_value import WindowedValue

from transforms.millwheel.event_time import (
    last_instant,
    to_millis,
    to_timestamp,
    window_start,
)
from transforms.millwheel.lateness import Lateness
from transforms.millwheel.state_params import apply_with_state_params
from transforms.records.zeitgeist_pb2 import SearchQuery, WindowCount
from transforms.zeitgeist.count_sums import add_counts
from transforms.zeitgeist.metrics import METRICS_NAMESPACE
from transforms.zeitgeist.params import WindowParams
from transforms.zeitgeist.pending_windows import PendingWindows
from transforms.zeitgeist.window_metrics import WindowCounters

LATE = "late"
# The count that marks a bounded input's end-of-input punctuation. Searches
# never carry it: `KeyByQuery` dead-letters negative counts, and zero is data
# (a quiet bucket of a pre-aggregated feed).
INPUT_END_COUNT = -1


class CombineWithinBundle(beam.DoFn):
    """Sums the counts of one (query, window) within a bundle before state.

    A stateful DoFn pays a state write per element; summing each bundle's
    searches per (key, window) first cuts that to one write per window seen in
    the bundle, as Beam's combiner lifting does for GroupByKey. The partial sum
    is a `SearchQuery` with a `count` and the earliest event time of the
    window's searches, which keeps it on the same side of the watermark.
    """

    def __init__(self, window_ms: int):
        self._window_ms = window_ms

    def start_bundle(self) -> None:
        self._partials: dict[tuple, list] = {}

    def process(self, element, window=beam.DoFn.WindowParam):
        key, search = element
        start = window_start(search.event_time, self._window_ms)
        partial = self._partials.get((key, start, window))
        if partial is None:
            self._partials[(key, start, window)] = [search.count, search.event_time]
        else:
            partial[0] = add_counts(partial[0], search.count)
            partial[1] = min(partial[1], search.event_time)

    def finish_bundle(self):
        for (key, _, window), (count, first_ms) in self._partials.items():
            partial = SearchQuery(query=key, event_time=first_ms, count=count)
            yield WindowedValue((key, partial), to_timestamp(first_ms), (window,))
        self._partials = {}


class KeyProgress(NamedTuple):
    """How far one query's windows have got (all in ms, None until known)."""

    emitted_through: int | None = None
    watermark: int | None = None
    last_active: int | None = None
    input_end: int | None = None


class WindowCounter(beam.DoFn):
    """Per query: counts per fixed window, emitted when the watermark passes.

    Keyed by the normalised query. Input `(query, SearchQuery)` (a `count`
    above one is a pre-aggregated partial); output `(query, WindowCount)`
    stamped with the window end and linked to the query's previous window
    (`previous_window_start`), and late records on the `late` tag.

    State, per query:
      - `pending`: (window start, count) partials of windows not yet
        emitted, added by searches, and `compacted`: the same partials
        folded by earlier firings (`PendingWindows`);
      - `progress` (`KeyProgress`, one cell so that a firing reads and
        writes it once): `emitted_through`, the end of the last emitted
        window, searches of windows ending by then being late; `watermark`,
        the key's view of the low watermark (its latest timer firing), which
        decides whether a late search is still within the allowed lateness;
        `last_active`, the start of the latest window that had searches (or
        a reported count of zero); and
        `input_end`, where a bounded input's data stops. Kept for the key's
        lifetime;
      - `retained`: counts of emitted windows still open to corrections
        (policy `correct` only), dropped once past the allowed lateness.

    Timers: one event-time timer per window (a dynamic family tagged by the
    window start) at the window end. When it fires it emits the window and,
    while the query has been active within `activity_horizon_windows`, sets
    the next window's timer, so zero-count windows keep coming until the
    horizon and then the loop stops. A `gc` timer clears the retained windows
    once the allowed lateness has passed after the last emission.
    """

    PENDING = BagStateSpec("pending", TupleCoder((VarIntCoder(), VarIntCoder())))
    COMPACTED = ReadModifyWriteStateSpec("compacted", BytesCoder())
    PROGRESS = ReadModifyWriteStateSpec(
        "progress",
        TupleCoder([NullableCoder(VarIntCoder())] * len(KeyProgress._fields)),
    )
    RETAINED = ReadModifyWriteStateSpec(
        "retained",
        MapCoder(VarIntCoder(), TupleCoder((VarIntCoder(), VarIntCoder()))),
    )
    WINDOW_END = TimerSpec("window_end", TimeDomain.WATERMARK)
    GC = TimerSpec("gc", TimeDomain.WATERMARK)

    def __init__(self, params: WindowParams):
        self._params = params
        self._counted = WindowCounters()
        # Elements sent to `late`, and the searches they hold (a partial
        # from `CombineWithinBundle` holds several).
        self._late = Metrics.counter(METRICS_NAMESPACE, "late_records")
        self._late_searches = Metrics.counter(METRICS_NAMESPACE, "late_searches")
        self._corrections = Metrics.counter(METRICS_NAMESPACE, "window_corrections")

    def process(
        self,
        element,
        pending=beam.DoFn.StateParam(PENDING),
        progress=beam.DoFn.StateParam(PROGRESS),
        retained=beam.DoFn.StateParam(RETAINED),
        window_end_timer=beam.DoFn.TimerParam(WINDOW_END),
    ):
        key, search = element
        known = _progress(progress)
        if search.count == INPUT_END_COUNT:
            # The end-of-input punctuation of a bounded input (see
            # CountWindows): no search, just where the data stops.
            progress.write(known._replace(input_end=search.event_time))
            return
        size = self._params.size_ms
        start = window_start(search.event_time, size)
        lateness = self._params.late_data.classify(
            start + size, known.emitted_through, known.watermark or 0
        )
        if lateness is Lateness.ON_TIME:
            pending.add((start, search.count))
            window_end_timer.set(
                last_instant(start + size), dynamic_timer_tag=str(start)
            )
        elif lateness is Lateness.CORRECTABLE:
            yield self._correct(key, start, search.count, retained)
        else:
            self._late.inc()
            self._late_searches.inc(search.count)
            yield beam.pvalue.TaggedOutput(LATE, search)

    def _correct(self, key, start, count, retained):
        """Fold a late count into an emitted window and re-emit it."""
        windows = retained.read() or {}
        previous, revision = windows.get(start, (0, 0))
        windows[start] = (add_counts(previous, count), revision + 1)
        retained.write(windows)
        self._corrections.inc()
        if previous != windows[start][0]:  # a window already full stays counted
            self._counted.count_saturated(windows[start][0])
        return (key, self._window_count(key, start, *windows[start]))

    @on_timer(WINDOW_END)
    def on_window_end(
        self,
        key=beam.DoFn.KeyParam,
        tag=beam.DoFn.DynamicTimerTagParam,
        pending=beam.DoFn.StateParam(PENDING),
        compacted=beam.DoFn.StateParam(COMPACTED),
        progress=beam.DoFn.StateParam(PROGRESS),
        retained=beam.DoFn.StateParam(RETAINED),
        window_end_timer=beam.DoFn.TimerParam(WINDOW_END),
        gc_timer=beam.DoFn.TimerParam(GC),
    ):
        size = self._params.size_ms
        fire_end = int(tag) + size
        known = _progress(progress)
        emitted = known.emitted_through
        if emitted is not None and fire_end <= emitted:
            # Already emitted by an earlier firing: each window goes out once,
            # even if a runner delivers a re-set timer twice.
            return
        windows = PendingWindows(compacted.read())
        partials = list(pending.read())
        windows.add(partials)
        counts = windows.take_through(fire_end - size)
        active = known.last_active
        input_end = known.input_end
        # The watermark is past fire_end, so every window ending by then is
        # complete, whichever of their timers happened to fire first.
        previous = None if emitted is None else emitted - size
        for start in self._windows_due(counts, active, emitted, fire_end, input_end):
            # A window that was reported, even with a count of zero, is
            # activity: a pre-aggregated feed's quiet buckets keep it alive.
            if start in counts:
                active = start
            count = counts.pop(start, 0)
            if self._params.late_data.retains(start + size, fire_end):
                self._retain(retained, start, count, fire_end)
            window = self._window_count(key, start, count, 0)
            self._counted.count(window)
            if previous is not None:
                window.previous_window_start = previous
            previous = start
            yield key, window
        progress.write(
            KeyProgress(
                # The chain downstream links each window to the last emitted.
                emitted_through=emitted if previous is None else previous + size,
                watermark=max(known.watermark or fire_end, fire_end),
                last_active=active,
                input_end=input_end,
            )
        )
        # Windows of the due range that were not emitted stay pending.
        windows.add(counts.items())
        if partials:
            pending.clear()
        if windows:
            compacted.write(windows.to_bytes())
        else:
            compacted.clear()

        horizon_ms = self._params.activity_horizon_windows * size
        observed = input_end is None or fire_end <= input_end
        still_active = active is not None and active + horizon_ms >= fire_end
        # A next window that has searches already has its timer, set when
        # they arrived. Setting it again would make Beam's FnApiRunner, which
        # fires a whole round of due timers, fire it a second time.
        if still_active and observed and fire_end not in windows:
            # The next window must be emitted even if no search arrives,
            # because only its zero count reveals a dip.
            window_end_timer.set(
                last_instant(fire_end + size), dynamic_timer_tag=str(fire_end)
            )
        if self._params.late_data.retains(fire_end, fire_end):
            gc_timer.set(
                to_timestamp(fire_end + self._params.late_data.allowed_lateness_ms)
            )

    def _windows_due(self, counts, active, emitted, fire_end, input_end) -> list[int]:
        """Starts of the windows to emit, in order, up to `fire_end`.

        Windows with searches, and after each active window the zero-count
        windows of its activity horizon, never before what was emitted, and
        never past the end of a bounded input: there the data is unobserved,
        not zero.
        """
        size = self._params.size_ms
        horizon = self._params.activity_horizon_windows
        with_data = [s for s in counts if s + size <= fire_end]
        anchors = with_data if active is None else [active, *with_data]
        starts = set(with_data)
        for anchor in anchors:
            starts.update(anchor + i * size for i in range(1, horizon + 1))
        floor = -(2**63) if emitted is None else emitted
        ceiling = fire_end if input_end is None else min(fire_end, input_end + 1)
        return sorted(
            s for s in starts if floor <= s and s + size <= fire_end and s < ceiling
        )

    def _retain(self, retained, start, count, watermark_ms):
        late_data = self._params.late_data
        size = self._params.size_ms
        windows = {
            s: v
            for s, v in (retained.read() or {}).items()
            if late_data.retains(s + size, watermark_ms)
        }
        windows[start] = (count, 0)
        retained.write(windows)

    @on_timer(GC)
    def on_gc(
        self,
        timestamp=beam.DoFn.TimestampParam,
        retained=beam.DoFn.StateParam(RETAINED),
        progress=beam.DoFn.StateParam(PROGRESS),
    ):
        # Re-armed at every emission, so it fires once the key has been quiet
        # for the allowed lateness: nothing retained can be corrected any
        # more, and the key's watermark moves up so that searches for those
        # windows are now classified as too late.
        retained.clear()
        known = _progress(progress)
        watermark = max(known.watermark or 0, to_millis(timestamp))
        progress.write(known._replace(watermark=watermark))

    def _window_count(self, key, start, count, revision):
        return WindowCount(
            query=key,
            window_start=start,
            window_end=start + self._params.size_ms,
            count=count,
            revision=revision,
        )


def _progress(state) -> KeyProgress:
    stored = state.read()
    return KeyProgress(*stored) if stored is not None else KeyProgress()


def last_event_time(event_times) -> int:
    """The latest of `event_times`, -1 if there is none: a bounded input's end."""
    return max(event_times, default=-1)


class CountWindows(beam.PTransform):
    """`(query, SearchQuery)` to `(query, WindowCount)`, plus a `late` output.

    Returns a `DoOutputsTuple`: the main output holds the window counts, the
    `late` tag the searches that came after their window was emitted and
    could not be corrected. They come summed as `WindowCounter` saw them:
    one `SearchQuery` per query, window and bundle (`CombineWithinBundle`),
    whose `query` is the key, `count` the searches' total and `event_time`
    the earliest of them; record ids are not kept. The metrics
    `late_records` and `late_searches` count those records and the
    searches in them.
    """

    def __init__(self, params: WindowParams = WindowParams()):
        super().__init__()
        self._params = params

    def expand(self, keyed_searches):
        combined = keyed_searches | "CombineWithinBundle" >> beam.ParDo(
            CombineWithinBundle(self._params.size_ms)
        ).with_input_types(tuple[str, SearchQuery]).with_output_types(
            tuple[str, SearchQuery]
        )
        if keyed_searches.is_bounded:
            # A bounded input ends: past its last search the counts are
            # unknown, and zero-count windows there would be false dips. Each
            # key gets a punctuation (`INPUT_END_COUNT`) carrying the input's
            # end.
            event_times = keyed_searches | "EventTimes" >> beam.Map(
                lambda kv: kv[1].event_time
            )
            end = beam.pvalue.AsSingleton(
                event_times | "Latest" >> beam.CombineGlobally(last_event_time)
            )
            # The keys of the bundle-combined partials: the same set, fewer.
            combined = (
                combined,
                combined | "InputEnd" >> _InputEndPunctuation(end),
            ) | "WithInputEnd" >> beam.Flatten()
        # Timer tags are window starts, and a window ends one size later.
        return apply_with_state_params(
            combined,
            "WindowCounter",
            beam.ParDo(WindowCounter(self._params))
            .with_output_types(tuple[str, WindowCount], **{LATE: SearchQuery})
            .with_outputs(LATE, main="windows"),
            {"window_ms": self._params.size_ms},
        )


class _InputEndPunctuation(beam.PTransform):
    """One `(key, SearchQuery(count=INPUT_END_COUNT, event_time=end))` per key;
    `end` is a singleton side input."""

    def __init__(self, end: beam.pvalue.AsSingleton):
        super().__init__()
        self._end = end

    def expand(self, keyed_searches):
        end = self._end
        return (
            keyed_searches
            | "Keys" >> beam.Keys()
            | "DistinctKeys" >> beam.Distinct()
            | "Punctuate"
            >> beam.Map(
                lambda key, end_ms: beam.window.TimestampedValue(
                    (key, _input_end(key, end_ms)),
                    to_timestamp(end_ms),
                ),
                end_ms=end,
            ).with_output_types(tuple[str, SearchQuery])
        )


def _input_end(key: str, end_ms: int) -> SearchQuery:
    return SearchQuery(query=key, event_time=end_ms, count=INPUT_END_COUNT)
