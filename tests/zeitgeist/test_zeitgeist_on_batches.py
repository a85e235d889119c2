"""ZeitgeistOnBatches gives Zeitgeist's outputs, record for record.

The same file goes through the job twice: read row by row into `Zeitgeist`,
and read into Arrow tables counted by `Zeitgeist.on_batches()`. The file
(Parquet, or the same rows as JSON Lines or CSV) holds generated traffic
with spikes and dips, re-sent searches (the same record id twice), searches
whose key is empty, and bad rows.
"""

import json
import pathlib
from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter

from pipelines.outputs import read_output
from pipelines.zeitgeist import build
from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.readers import ReadSearchQueries
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    EpisodeStatus,
    SearchQuery,
    WindowCount,
    WindowScore,
)
from transforms.zeitgeist.composite import (
    ANOMALIES,
    DEAD_LETTERS,
    LATE_RECORDS,
    SCORES,
    WINDOW_COUNTS,
    Zeitgeist,
)
from transforms.zeitgeist.params import WindowParams
from transforms.zeitgeist.query_keys import fold

pytestmark = pytest.mark.both_runners

WINDOW_MS = 30 * 60 * 1000
RESENT = 20
OUTPUTS = {
    ANOMALIES: Anomaly,
    WINDOW_COUNTS: WindowCount,
    SCORES: WindowScore,
    LATE_RECORDS: SearchQuery,
    DEAD_LETTERS: DeadLetter,
}


# What the window counter and the detector count, whichever path they take.
COUNTERS = (
    "windows_emitted",
    "zero_windows_emitted",
    "spikes_detected",
    "dips_detected",
    "episodes_closed",
    "episodes_open_at_end",
    "window_counts_saturated",
)


def drop_unwanted(query: str) -> str:
    """`fold`, with the queries a user filters out keyed empty."""
    return "" if query.startswith("unwanted") else fold(query)


class Searches(NamedTuple):
    path: pathlib.Path
    generated: int  # searches generated, each sent once


def _write_searches(folder: pathlib.Path, spec: StreamSpec) -> Searches:
    """Generated searches, then re-sent ones, an unwanted query, a bad count
    and a blank query, in one Parquet file."""
    stream = generate(spec, seed=7)
    stream.write_parquet(folder / "generated.parquet")
    table = pq.read_table(folder / "generated.parquet")
    (folder / "generated.parquet").unlink()
    first = table.slice(0, RESENT).to_pydict()
    start = first["event_time"][0]
    extra = pa.table(
        {
            "query": [*first["query"], "unwanted x", "q", " "],
            "event_time": [*first["event_time"], start, start, start],
            "record_id": [*first["record_id"], None, None, None],
            "count": [*first["count"], 4, -2, 1],
        },
        schema=table.schema,
    )
    path = folder / "searches.parquet"
    pq.write_table(pa.concat_tables([table, extra]), path)
    return Searches(path, pc.sum(table.column("count")).as_py())


@pytest.fixture(scope="module")
def traffic(tmp_path_factory) -> Searches:
    """Two days of five queries, with spikes and dips."""
    spec = StreamSpec(
        num_queries=5, duration_ms=2 * DAY_MS, window_ms=WINDOW_MS, base_rate=40.0
    )
    return _write_searches(tmp_path_factory.mktemp("traffic"), spec)


@pytest.fixture(scope="module")
def resent(tmp_path_factory) -> Searches:
    """Six hours of two queries: small, as dedup costs state per search."""
    spec = StreamSpec(
        num_queries=2, duration_ms=12 * WINDOW_MS, window_ms=WINDOW_MS, base_rate=20.0
    )
    return _write_searches(tmp_path_factory.mktemp("resent"), spec)


def _run(
    source: pathlib.Path,
    output: pathlib.Path,
    read,
    dedup_ms: int,
    window: WindowParams = WindowParams(size_ms=WINDOW_MS),
    scores: bool = True,
) -> dict:
    transform = Zeitgeist(
        window, key_fn=drop_unwanted, dedup_horizon_ms=dedup_ms, scores=scores
    )
    pipeline = beam.Pipeline()
    extra = [WINDOW_COUNTS, SCORES]
    build(pipeline, [str(source)], None, transform, output, extra, read)
    steps = pipeline.to_runner_api().components.transforms.values()
    # Parquet read as the files they are takes the columnar path.
    assert any(s.unique_name.endswith("/PreCount") for s in steps) == (read is None)
    result = pipeline.run()
    result.wait_until_finish()
    outputs = {
        name: sorted(m.SerializeToString() for m in read_output(output, name, kind))
        for name, kind in OUTPUTS.items()
    }
    outputs["counters"] = _counters(result)
    return outputs


def _counters(result, names=COUNTERS) -> dict[str, int]:
    """The counters `names` of a finished run, 0 where not counted."""
    totals = dict.fromkeys(names, 0)
    query = MetricsFilter().with_namespace("millwheel.zeitgeist")
    for counter in result.metrics().query(query)["counters"]:
        name = counter.key.metric.name
        if name in totals:
            totals[name] += counter.committed
    return totals


def _same_outputs(searches: Searches, output: pathlib.Path, dedup_ms: int) -> dict:
    """The columnar job's outputs, checked equal to the per-row job's."""
    per_row = _run(searches.path, output / "rows", ReadSearchQueries, dedup_ms)
    columnar = _run(searches.path, output / "columnar", None, dedup_ms)
    assert len(per_row[DEAD_LETTERS]) == 3  # bad count, blank, unwanted
    for name in [*OUTPUTS, "counters"]:
        assert columnar[name] == per_row[name], name
    assert columnar["counters"]["windows_emitted"] == len(columnar[WINDOW_COUNTS])
    return columnar


def _counted(outputs: dict) -> int:
    return sum(WindowCount.FromString(w).count for w in outputs[WINDOW_COUNTS])


def test_the_columnar_job_writes_what_the_per_row_job_writes(traffic, tmp_path):
    outputs = _same_outputs(traffic, tmp_path, dedup_ms=0)
    assert len(outputs[ANOMALIES]) >= 2
    # Without dedup a re-sent search counts twice.
    assert _counted(outputs) == traffic.generated + RESENT


def test_the_same_with_dedup_which_counts_a_re_sent_search_once(resent, tmp_path):
    outputs = _same_outputs(resent, tmp_path, dedup_ms=DAY_MS)
    assert _counted(outputs) == resent.generated


@pytest.mark.parametrize("path", ["per_row", "columnar"])
def test_without_scores_the_scores_are_empty_and_the_rest_the_same(
    resent, tmp_path, path
):
    read = ReadSearchQueries if path == "per_row" else None
    scored = _run(resent.path, tmp_path / "scored", read, dedup_ms=DAY_MS)
    unscored = _run(
        resent.path, tmp_path / "unscored", read, dedup_ms=DAY_MS, scores=False
    )
    assert len(scored[SCORES]) == len(scored[WINDOW_COUNTS]) > 0
    assert unscored[SCORES] == []
    for name in [*OUTPUTS, "counters"]:
        if name != SCORES:
            assert unscored[name] == scored[name], name


def _as_text(searches: Searches, path: pathlib.Path) -> Searches:
    """The same rows as JSON Lines or CSV (by `path`'s extension)."""
    table = pq.read_table(searches.path)
    if path.suffix == ".csv":
        pa_csv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    return searches._replace(path=path)


@pytest.mark.parametrize("name", ["searches.jsonl", "searches.csv"])
def test_the_same_for_json_lines_and_csv(resent, tmp_path, name):
    text = _as_text(resent, tmp_path / name)
    outputs = _same_outputs(text, tmp_path, dedup_ms=DAY_MS)
    assert _counted(outputs) == resent.generated


@pytest.mark.parametrize("horizon", [0, 3])
def test_zero_windows_follow_the_activity_horizon_and_stop_at_the_input_end(
    tmp_path, horizon
):
    # Windows (of WINDOW_MS) with searches, per query: "gappy" has a gap
    # longer than the horizon and a reported zero; "early" stops long before
    # the input ends; "late" has one search, the input's last.
    start = 1_767_571_200_000
    at = {"gappy": [0, 1, 9, 10, 11], "early": [0, 2], "late": [14]}
    rows = [
        (query, start + w * WINDOW_MS + 7, 0 if (query, w) == ("gappy", 10) else 2)
        for query, windows in at.items()
        for w in windows
    ]
    path = tmp_path / "edges.parquet"
    queries, times, counts = zip(*rows, strict=True)
    pq.write_table(
        pa.table({"query": queries, "event_time": times, "count": counts}), path
    )
    window = WindowParams(size_ms=WINDOW_MS, activity_horizon_windows=horizon)
    per_row = _run(path, tmp_path / "rows", ReadSearchQueries, 0, window)
    columnar = _run(path, tmp_path / "columnar", None, 0, window)
    for name in [*OUTPUTS, "counters"]:
        assert columnar[name] == per_row[name], name
    emitted = {}
    for raw in per_row[WINDOW_COUNTS]:
        w = WindowCount.FromString(raw)
        emitted.setdefault(w.query, []).append((w.window_start - start) // WINDOW_MS)
    if horizon == 3:
        assert sorted(emitted["gappy"]) == [0, 1, 2, 3, 4, 9, 10, 11, 12, 13, 14]
        assert sorted(emitted["early"]) == [0, 1, 2, 3, 4, 5]
    else:
        assert sorted(emitted["gappy"]) == at["gappy"]
    assert emitted["late"] == [14]


def test_an_episode_still_open_at_the_end_is_summarised_on_both_paths(tmp_path):
    # A steady query, then a surge over its last windows: its episode opens
    # and is still open when the input ends.
    start = 1_767_571_200_000
    counts = [50 + (w % 3) for w in range(40)] + [400, 450, 500]
    path = tmp_path / "surge.parquet"
    pq.write_table(
        pa.table(
            {
                "query": ["surge"] * len(counts),
                "event_time": [start + w * WINDOW_MS for w in range(len(counts))],
                "count": counts,
            }
        ),
        path,
    )
    per_row = _run(path, tmp_path / "rows", ReadSearchQueries, 0)
    columnar = _run(path, tmp_path / "columnar", None, 0)
    for name in [*OUTPUTS, "counters"]:
        assert columnar[name] == per_row[name], name
    statuses = [Anomaly.FromString(a).status for a in columnar[ANOMALIES]]
    assert statuses == [EpisodeStatus.OPENED, EpisodeStatus.OPEN_AT_END]
    assert columnar["counters"]["episodes_open_at_end"] == 1
    assert columnar["counters"]["spikes_detected"] == 1


def test_a_window_whose_counts_pass_int64_holds_the_largest_on_both_paths(tmp_path):
    # Each count is valid, their sum is not an int64: Arrow's sum wrapped
    # round to a negative count, and the per-row path failed the job.
    start = 1_767_571_200_000
    rows = [(start + i, 2**62) for i in range(3)] + [(start + WINDOW_MS, 5)]
    path = tmp_path / "huge.parquet"
    times, counts = zip(*rows, strict=True)
    pq.write_table(
        pa.table({"query": ["huge"] * 4, "event_time": times, "count": counts}), path
    )
    window = WindowParams(size_ms=WINDOW_MS)
    per_row = _run(path, tmp_path / "rows", ReadSearchQueries, 0, window)
    columnar = _run(path, tmp_path / "columnar", None, 0, window)
    for outputs in (per_row, columnar):
        counted = [WindowCount.FromString(w).count for w in outputs[WINDOW_COUNTS]]
        assert sorted(counted) == [5, 2**63 - 1]
        # One window, however many of its sums stopped at the largest: the
        # count of sums differed by bundle and format (1 in JSON Lines, 10
        # in Parquet for the same rows).
        assert outputs["counters"]["window_counts_saturated"] == 1
