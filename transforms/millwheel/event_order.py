"""Per-key processing in event-time order, driven by the low watermark.

Beam does not order the elements of a key across a shuffle, but a MillWheel
computation such as a model that folds windows one after the other needs
them in order. The recipe: buffer each element in a bag and set an event-time
timer, tagged with the element's window, at the element's window end. The
timer fires once the input watermark has passed that end, by which time every
element with an earlier end has arrived (upstream output timestamps hold the
watermark), so the due elements can be taken sorted.

The functions below are that recipe; each DoFn that uses it declares its own
bag and dynamic timer family as class attributes.
"""

from collections.abc import Callable, Iterable
from typing import TypeVar

from apache_beam.transforms.userstate import AccumulatingRuntimeState, RuntimeTimer

from transforms.millwheel.event_time import to_timestamp

T = TypeVar("T")


def buffer_until_watermark(
    pending: AccumulatingRuntimeState,
    timer: RuntimeTimer,
    element: object,
    window_start: int,
    window_end: int,
) -> None:
    """Buffer `element` until the watermark passes `window_end` (ms)."""
    pending.add(element)
    # One timer per window: a second element of the same window re-sets the
    # same timer instead of adding another firing.
    timer.set(to_timestamp(window_end), dynamic_timer_tag=str(window_start))


def take_due(
    pending: AccumulatingRuntimeState,
    watermark_ms: int,
    window_end_of: Callable[[T], int],
    order_key: Callable[[T], object],
) -> list[T]:
    """Remove and return, in order, the buffered elements ending by `watermark_ms`.

    Elements of later windows stay buffered: their own timers will take them.
    """
    buffered: Iterable[T] = pending.read()
    due, later = [], []
    for element in buffered:
        (due if window_end_of(element) <= watermark_ms else later).append(element)
    if due:
        pending.clear()
        for element in later:
            pending.add(element)
    return sorted(due, key=order_key)
