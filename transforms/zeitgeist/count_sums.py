"""Counts of searches added up without leaving int64.

A count is an int64 in every record (`SearchQuery.count`,
`WindowCount.count`), and one search may report up to the largest. A window
of several can add up past it: Arrow's sums would wrap round to a negative
count, and protobuf and `array("q")` refuse the value and fail the job. So
every sum of counts stops at `MAX_COUNT`: a window that full is beyond
anything the model tells apart, and the record keeps its place in the
window. The windows emitted at `MAX_COUNT` are counted in the metric
`window_counts_saturated` (`window_metrics.WindowCounters`), once each: the
number of sums that stopped there depends on the bundles and the format.
"""

import numpy as np

from transforms.records.parse import INT64_MAX

MAX_COUNT = INT64_MAX


def add_counts(total: int, count: int) -> int:
    """`total + count`, or `MAX_COUNT` when that is beyond it."""
    return min(total + count, MAX_COUNT)


def may_pass_max(counts: np.ndarray) -> bool:
    """Whether summing `counts` (int64, >= 0) in any grouping could pass
    `MAX_COUNT`: only when the largest is that large, never in practice."""
    return bool(counts.size) and int(counts.max()) > MAX_COUNT // counts.size
