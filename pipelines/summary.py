"""The one-screen summary printed at the end of a pipeline run."""

from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.runner import PipelineResult


def counter_totals(
    result: PipelineResult, namespaces: tuple[str, ...]
) -> dict[str, int]:
    """Committed counter values by "namespace/name", summed over steps.

    Runners that do not commit metrics (some report attempted values only)
    fall back to the attempted value.
    """
    totals: dict[str, int] = {}
    for namespace in namespaces:
        query = result.metrics().query(MetricsFilter().with_namespace(namespace))
        for counter in query["counters"]:
            value = (
                counter.committed
                if counter.committed is not None
                else counter.attempted
            )
            name = f"{namespace}/{counter.key.metric.name}"
            totals[name] = totals.get(name, 0) + (value or 0)
    return totals


def format_table(title: str, rows: list[tuple[str, object]]) -> str:
    width = max(len(label) for label, _ in rows)
    lines = [title, "-" * len(title)]
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    return "\n".join(lines)
