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


# A followed input's counters (`transforms.records.follow`), each shown
# when the run has it: a run that followed no file has none.
_FOLLOWED_FILES_ROWS = (
    ("files read", "millwheel.records/files_followed"),
    ("  read again (changed)", "millwheel.records/files_read_again"),
    ("  another path to one read, skipped", "millwheel.records/same_files_skipped"),
    ("  deleted once read", "millwheel.records/files_deleted"),
    ("  archived once read", "millwheel.records/files_archived"),
    ("  refused deletion or move", "millwheel.records/files_not_cleared"),
)


def followed_files_rows(totals: dict[str, int]) -> list[tuple[str, int]]:
    """The summary's rows on the files a live run followed."""
    return [
        (label, totals[name]) for label, name in _FOLLOWED_FILES_ROWS if name in totals
    ]


# What the inputs held that was not read, each shown when it happened: the
# rows of unreadable Parquet row groups (a dead letter a group, so under the
# dead letters) and the directories a pattern matched (`unlisted_matches`).
_UNREAD_ROWS = (
    ("  rows of unreadable row groups", "millwheel.records/rows_unreadable"),
    ("directories matched, not read", "millwheel.records/directories_skipped"),
)


def unreadable_rows(totals: dict[str, int]) -> list[tuple[str, int]]:
    """The summary's rows on what the inputs held that was not read."""
    return [(label, totals[name]) for label, name in _UNREAD_ROWS if totals.get(name)]
