"""Stateful and timer pipelines that the Spark tests compare with DirectRunner.

Kept in an importable module (not a test file) so that the DoFns pickle by
reference and Spark's Python workers can import them.
"""

from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.coders import StrUtf8Coder, TupleCoder, VarIntCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

WINDOW = 10


class SumFn(beam.CombineFn):
    """Integer sum whose accumulator is an int (so a VarIntCoder fits it)."""

    def create_accumulator(self):
        return 0

    def add_input(self, accumulator, value):
        return accumulator + value

    def merge_accumulators(self, accumulators):
        return sum(accumulators)

    def extract_output(self, accumulator):
        return accumulator


class WindowCounterFn(beam.DoFn):
    """Per key: counts per WINDOW-second window, emitted when the watermark
    passes the window's end through a dynamic timer family (one timer per open
    window). A negative value cancels its window's pending flush (a cleared
    timer). A looping heartbeat timer re-arms itself every WINDOW seconds
    until past the key's last window. Uses bag, combining, set and
    read-modify-write state."""

    COUNTS = userstate.BagStateSpec(
        "counts", TupleCoder([VarIntCoder(), VarIntCoder()])
    )
    TOTAL = userstate.CombiningValueStateSpec("total", VarIntCoder(), SumFn())
    SEEN = userstate.SetStateSpec("seen", StrUtf8Coder())
    LAST = userstate.ReadModifyWriteStateSpec("last", VarIntCoder())
    FIRST_BEAT = userstate.ReadModifyWriteStateSpec("first_beat", VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)
    BEAT = userstate.TimerSpec("beat", TimeDomain.WATERMARK)

    def process(
        self,
        element,
        ts=beam.DoFn.TimestampParam,
        counts=beam.DoFn.StateParam(COUNTS),
        total=beam.DoFn.StateParam(TOTAL),
        seen=beam.DoFn.StateParam(SEEN),
        last=beam.DoFn.StateParam(LAST),
        first_beat=beam.DoFn.StateParam(FIRST_BEAT),
        flush=beam.DoFn.TimerParam(FLUSH),
        beat=beam.DoFn.TimerParam(BEAT),
    ):
        _, value = element
        start = int(ts.micros // 1_000_000) // WINDOW * WINDOW
        if value < 0:
            flush.set(Timestamp(start + WINDOW), dynamic_timer_tag="cancelled")
            flush.clear(dynamic_timer_tag="cancelled")
            return
        counts.add((start, 1))
        total.add(value)
        seen.add(str(value % 3))
        # The heartbeat starts at the end of the key's earliest window; moving
        # the timer earlier replaces it (one timer per key and window).
        if first_beat.read() is None or start + WINDOW < first_beat.read():
            first_beat.write(start + WINDOW)
            beat.set(Timestamp(start + WINDOW))
        last.write(max(last.read() or 0, start))
        flush.set(Timestamp(start + WINDOW), dynamic_timer_tag=str(start))

    @userstate.on_timer(FLUSH)
    def on_flush(
        self,
        key=beam.DoFn.KeyParam,
        tag=beam.DoFn.DynamicTimerTagParam,
        ts=beam.DoFn.TimestampParam,
        counts=beam.DoFn.StateParam(COUNTS),
        total=beam.DoFn.StateParam(TOTAL),
        seen=beam.DoFn.StateParam(SEEN),
    ):
        start = int(tag)
        entries = list(counts.read())
        n = sum(c for s, c in entries if s == start)
        counts.clear()
        for s, c in entries:
            if s != start:
                counts.add((s, c))
        yield f"{key} window={start} n={n} total={total.read()} " + (
            f"mods={sorted(seen.read())} at={int(ts.micros // 1_000_000)}"
        )

    @userstate.on_timer(BEAT)
    def on_beat(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        last=beam.DoFn.StateParam(LAST),
        beat=beam.DoFn.TimerParam(BEAT),
    ):
        now = int(ts.micros // 1_000_000)
        yield f"{key} beat at={now}"
        if now <= (last.read() or 0):
            beat.set(Timestamp(now + WINDOW))


class ProcessingTimeFn(beam.DoFn):
    """Buffers values per key and flushes them on a processing-time timer."""

    BUFFER = userstate.BagStateSpec("buffer", VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.REAL_TIME)

    def process(
        self,
        element,
        buffer=beam.DoFn.StateParam(BUFFER),
        flush=beam.DoFn.TimerParam(FLUSH),
    ):
        buffer.add(element[1])
        flush.set(Timestamp.now() + 0.5)

    @userstate.on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        yield f"{key} flushed {sorted(buffer.read())}"
        buffer.clear()


def events(n_keys: int = 5, n_events: int = 400) -> list:
    """Deterministic keyed events spread over several windows, some negative."""
    out = []
    for i in range(n_events):
        key = f"k{i % n_keys}"
        ts = (i * 7) % 95
        value = -1 if i % 41 == 0 else i
        out.append(TimestampedValue((key, value), ts))
    return out


def stateful_pipeline(p: beam.Pipeline) -> beam.PCollection:
    """Events -> WindowCounterFn -> one string per flush or heartbeat."""
    return (
        p
        | beam.Create(events())
        | "Reify" >> beam.Map(lambda kv: kv).with_output_types(tuple[str, int])
        | "Count" >> beam.ParDo(WindowCounterFn())
        | "Stamp" >> beam.Map(lambda s, t=beam.DoFn.TimestampParam: f"{s} ts={t}")
    )


class FailOnceFn(beam.DoFn):
    """Fails the first attempt of whichever task first sees element 0.

    The marker file is created atomically, so exactly one attempt fails and
    Spark's retry of that task succeeds.
    """

    def __init__(self, marker: str) -> None:
        self._marker = marker

    def process(self, element):
        if element == 0:
            try:
                fd = os.open(self._marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                raise RuntimeError("injected failure of a first task attempt")
        yield element


def cluster_pipeline(p: beam.Pipeline, marker: str, out_prefix: str) -> None:
    """Keyed counts through a retried stage, written to text files."""
    _ = (
        p
        | beam.Create(list(range(200)))
        | "FailOnce" >> beam.ParDo(FailOnceFn(marker))
        | beam.Map(lambda x: TimestampedValue((f"k{x % 4}", x), x))
        | beam.Map(lambda kv: kv).with_output_types(tuple[str, int])
        | "Count" >> beam.ParDo(WindowCounterFn())
        | beam.io.WriteToText(out_prefix)
    )


class OrderedListFn(beam.DoFn):
    """Keeps values in an ordered-list state by timestamp; emits them sorted
    when an event-time timer at the end of time fires."""

    EVENTS = userstate.OrderedListStateSpec("events", VarIntCoder())
    DONE = userstate.TimerSpec("done", TimeDomain.WATERMARK)

    def process(
        self,
        element,
        events=beam.DoFn.StateParam(EVENTS),
        done=beam.DoFn.TimerParam(DONE),
    ):
        _, value = element
        events.add((Timestamp(value), value))
        done.set(Timestamp(1000))

    @userstate.on_timer(DONE)
    def on_done(self, key=beam.DoFn.KeyParam, events=beam.DoFn.StateParam(EVENTS)):
        yield key, [v for _, v in events.read_range(Timestamp(10), Timestamp(90))]


class TimerChangesFn(beam.DoFn):
    """Logs its timer firings per key; each firing changes timers already due.

    The element sets `first` (10), `gc` (40) and `end` (50). Once the input
    is done all three are due, but `first` clears `gc` and sets `second`
    (20): a runner that honours a callback's changes before the next firing
    logs first@10, second@20, end@50.
    """

    LOG = userstate.BagStateSpec("log", StrUtf8Coder())
    FIRST = userstate.TimerSpec("first", TimeDomain.WATERMARK)
    SECOND = userstate.TimerSpec("second", TimeDomain.WATERMARK)
    GC = userstate.TimerSpec("gc", TimeDomain.WATERMARK)
    END = userstate.TimerSpec("end", TimeDomain.WATERMARK)

    def process(
        self,
        element,
        first=beam.DoFn.TimerParam(FIRST),
        gc=beam.DoFn.TimerParam(GC),
        end=beam.DoFn.TimerParam(END),
    ):
        first.set(Timestamp(10))
        gc.set(Timestamp(40))
        end.set(Timestamp(50))

    @userstate.on_timer(FIRST)
    def on_first(
        self,
        ts=beam.DoFn.TimestampParam,
        log=beam.DoFn.StateParam(LOG),
        second=beam.DoFn.TimerParam(SECOND),
        gc=beam.DoFn.TimerParam(GC),
    ):
        log.add(f"first@{int(ts)}")
        second.set(Timestamp(20))
        gc.clear()

    @userstate.on_timer(SECOND)
    def on_second(self, ts=beam.DoFn.TimestampParam, log=beam.DoFn.StateParam(LOG)):
        log.add(f"second@{int(ts)}")

    @userstate.on_timer(GC)
    def on_gc(self, ts=beam.DoFn.TimestampParam, log=beam.DoFn.StateParam(LOG)):
        log.add(f"gc@{int(ts)}")

    @userstate.on_timer(END)
    def on_end(
        self,
        key=beam.DoFn.KeyParam,
        ts=beam.DoFn.TimestampParam,
        log=beam.DoFn.StateParam(LOG),
    ):
        yield f"{key}: " + ",".join([*log.read(), f"end@{int(ts)}"])
