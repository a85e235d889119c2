"""Per-key processing in production order, whatever order delivery has.

Beam does not order the elements of a key across a shuffle, but a MillWheel
computation such as a model that folds windows one after the other needs
them in order. Ordering by the watermark alone is not enough on every runner
(the Python DirectRunner does not hold its output watermark for timers set
in timer callbacks), so the producer links each record to the one it emitted
before for the same key, and the consumer buffers a record in a bag until its
predecessor has been processed. Like a MillWheel sequence number, the link
needs no clock and no cooperation from the runner.

Each DoFn that uses this declares its own bag state as a class attribute.
"""

from collections.abc import Callable
from typing import TypeVar

from apache_beam.transforms.userstate import AccumulatingRuntimeState

T = TypeVar("T")

# A chain longer than this means a link was lost upstream; better to release
# the buffered records in order than to hold them, and the key's state, forever.
MAX_BUFFERED = 10_000


def release_in_sequence(
    pending: AccumulatingRuntimeState,
    element: T,
    last_released: int | None,
    position: Callable[[T], int],
    predecessor: Callable[[T], int | None],
) -> tuple[list[T], bool]:
    """Buffer `element`; return the records now next in sequence, in order.

    `last_released` is the position of the last record processed (None
    before the first). Returns the records to process and whether the chain
    was forced past a gap because the buffer overflowed. Records at or before
    `last_released` are not returned: they are stale duplicates.
    """
    buffered = list(pending.read())
    waiting = {predecessor(r): r for r in [*buffered, element]}
    released: list[T] = []
    cursor = last_released
    while cursor in waiting:
        record = waiting.pop(cursor)
        released.append(record)
        cursor = position(record)
    forced = len(waiting) > MAX_BUFFERED
    if forced:
        released.extend(sorted(waiting.values(), key=position))
        waiting = {}
    fresh = [
        r
        for r in waiting.values()
        if last_released is None or position(r) > last_released
    ]
    if released or len(fresh) != len(buffered) + 1:
        pending.clear()
        for record in fresh:
            pending.add(record)
    else:
        pending.add(element)
    return released, forced


def previous_window(record) -> int | None:
    """The `previous_window_start` link of a Zeitgeist record, if it has one."""
    if record.HasField("previous_window_start"):
        return record.previous_window_start
    return None
