"""Counts of searches added up without leaving int64.

A count is an int64 in every record (`SearchQuery.count`,
`WindowCount.count`), and one search may report up to the largest. A window
of several can add up past it: Arrow's sums would wrap round to a negative
count, and protobuf and `array("q")` refuse the value and fail the job. So
every sum of counts stops at `MAX_COUNT` and is counted in the metric
`window_counts_saturated`: a window that full is beyond anything the model
tells apart, and the record keeps its place in the window.
"""

import numpy as np
from apache_beam.metrics import Metrics

from transforms.records.parse import INT64_MAX
from transforms.zeitgeist.metrics import METRICS_NAMESPACE

MAX_COUNT = INT64_MAX
_SATURATED = Metrics.counter(METRICS_NAMESPACE, "window_counts_saturated")


def add_counts(total: int, count: int) -> int:
    """`total + count`, or `MAX_COUNT` when that is beyond it."""
    summed = total + count
    if summed > MAX_COUNT:
        _SATURATED.inc()
        return MAX_COUNT
    return summed


def may_pass_max(counts: np.ndarray) -> bool:
    """Whether summing `counts` (int64, >= 0) in any grouping could pass
    `MAX_COUNT`: only when the largest is that large, never in practice."""
    return bool(counts.size) and int(counts.max()) > MAX_COUNT // counts.size
