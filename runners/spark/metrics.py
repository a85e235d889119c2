"""User metrics: from SDK bundle responses, through a Spark accumulator, to
``PipelineResult.metrics()``.

Each task folds the user MonitoringInfos of its bundles into a
:class:`MetricsSnapshot` and adds it to the job's accumulator once, when its
partition is done. Spark merges the updates of successful tasks; the driver
reads the merged snapshot after the job. A cached partition's metrics ride
in the partition instead, and its readers add them (:class:`JobMetrics`). A
micro-batch's tasks send theirs to the driver as records of their cached
outputs, which the batch's last step collects once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apache_beam.metrics import monitoring_infos as mi
from apache_beam.metrics.cells import DistributionResult, GaugeResult
from apache_beam.metrics.execution import MetricKey, MetricResult
from apache_beam.metrics.metric import MetricResults
from apache_beam.metrics.metricbase import MetricName
from apache_beam.runners.portability import portable_metrics
from pyspark.accumulators import AccumulatorParam

# The runner's own counter of elements a GroupByKey drops because their
# window expired (Beam's Java runners call it the same).
DROPPED_LATE = "droppedDueToLateness"
RUNNER_NAMESPACE = "SparkRunner"

_KINDS = ("counters", "distributions", "gauges", "string_sets", "bounded_tries")


def _merge_value(kind: str, a: Any, b: Any) -> Any:
    if kind == "counters":
        return a + b
    if kind == "distributions":
        return DistributionResult(a.data.combine(b.data))
    if kind == "gauges":
        return GaugeResult(a.data.combine(b.data))
    if kind == "string_sets":
        return a | b
    return a.combine(b)


class MetricsSnapshot:
    """User metrics by MetricKey, mergeable across bundles and tasks."""

    def __init__(self) -> None:
        self.values: dict[str, dict] = {kind: {} for kind in _KINDS}

    def add_monitoring_infos(self, monitoring_infos: Any) -> None:
        """Folds one bundle's MonitoringInfos in (user metrics only)."""
        parsed = portable_metrics.from_monitoring_infos(monitoring_infos, True)
        for kind, values in zip(_KINDS, parsed, strict=True):
            self._merge_kind(kind, values)

    def add_counter(self, step: str, name: str, value: int) -> None:
        """Adds to one of the runner's own counters (namespace SparkRunner)."""
        key = MetricKey(step, MetricName(RUNNER_NAMESPACE, name))
        self._merge_kind("counters", {key: value})

    def merge(self, other: MetricsSnapshot) -> MetricsSnapshot:
        """Merges ``other`` into this snapshot and returns it."""
        for kind in _KINDS:
            self._merge_kind(kind, other.values[kind])
        return self

    def _merge_kind(self, kind: str, values: dict) -> None:
        mine = self.values[kind]
        for key, value in values.items():
            mine[key] = _merge_value(kind, mine[key], value) if key in mine else value

    def __bool__(self) -> bool:
        return any(self.values.values())

    def monitoring_infos(self) -> list:
        """The snapshot as user MonitoringInfos (for the Job API)."""
        makers = {
            "counters": lambda ns, n, v, t: mi.int64_user_counter(ns, n, v, t),
            "distributions": lambda ns, n, v, t: mi.int64_user_distribution(
                ns, n, v.data, t
            ),
            "gauges": lambda ns, n, v, t: mi.int64_user_gauge(ns, n, v.data, t),
            "string_sets": lambda ns, n, v, t: mi.user_set_string(ns, n, set(v), t),
            "bounded_tries": lambda ns, n, v, t: mi.user_bounded_trie(ns, n, v, t),
        }
        return [
            makers[kind](key.metric.namespace, key.metric.name, value, key.step)
            for kind in _KINDS
            for key, value in self.values[kind].items()
        ]


@dataclass(frozen=True)
class CachedPartitionMetrics:
    """The metrics of one partition of a cached stage's output, which every
    task reading the partition adds to the job's accumulator."""

    stage: str
    partition: int
    snapshot: MetricsSnapshot


class JobMetrics:
    """A batch job's accumulator value: what tasks counted as they ran their
    stages, and each cached partition's metrics, counted once however many
    tasks read the partition.

    A cached partition is computed once, by the first task that needs it.
    When that task failed further on, Spark dropped its accumulator updates,
    and its retry read the cached partition without running the stage, so
    the stage's counts were lost. So the partition carries its metrics, and
    every task that reads it adds them (`CachedPartitionMetrics`): a reader
    that fails is retried and adds them again, and any number of readers
    that succeed count them once.
    """

    def __init__(self) -> None:
        self.counted = MetricsSnapshot()
        self.cached: dict[tuple[str, int], MetricsSnapshot] = {}

    def add(self, update: JobMetrics | CachedPartitionMetrics | MetricsSnapshot):
        """Folds `update` in and returns this."""
        if isinstance(update, JobMetrics):
            self.counted.merge(update.counted)
            for key, snapshot in update.cached.items():
                self.cached.setdefault(key, snapshot)
        elif isinstance(update, CachedPartitionMetrics):
            self.cached.setdefault((update.stage, update.partition), update.snapshot)
        else:
            self.counted.merge(update)
        return self

    def snapshot(self) -> MetricsSnapshot:
        """Everything counted, as one snapshot."""
        total = MetricsSnapshot().merge(self.counted)
        for snapshot in self.cached.values():
            total.merge(snapshot)
        return total


class JobMetricsParam(AccumulatorParam):
    """Spark accumulator semantics for :class:`JobMetrics`."""

    def zero(self, value: JobMetrics) -> JobMetrics:
        return JobMetrics()

    def addInPlace(self, a: JobMetrics, b) -> JobMetrics:
        return a.add(b)


class SparkMetrics(MetricResults):
    """Queryable committed user metrics of a finished Spark job."""

    def __init__(self, snapshot: MetricsSnapshot) -> None:
        self._snapshot = snapshot

    def query(self, filter=None) -> dict[str, list[MetricResult]]:
        names = {
            "counters": self.COUNTERS,
            "distributions": self.DISTRIBUTIONS,
            "gauges": self.GAUGES,
            "string_sets": self.STRINGSETS,
            "bounded_tries": self.BOUNDED_TRIES,
        }
        return {
            names[kind]: [
                MetricResult(key, value, value)
                for key, value in self._snapshot.values[kind].items()
                if self.matches(filter, key)
            ]
            for kind in _KINDS
        }
