"""Deterministic query and click logs for Photon, with their ground truth.

``generate(spec, seed)`` builds a query log and a click log with the
troubles Photon exists for, and records what a correct join must output:

- every query is served at a time in ``[start_ms, start_ms + duration_ms)``
  and gets a random number of clicks, each ``click_delay`` after it;
- a query's log record may *arrive* late (``late_query_fraction``), after
  some of its clicks: the click-before-query case;
- some clicks are duplicated (``duplicate_fraction``): the same record again,
  or re-logged with a new record id, arriving later;
- orphan clicks (``orphan_fraction``) name a query that never appears;
- ``old_clicks`` clicks (with their queries) are far older than the rest, by
  ``old_age_days``: with the id registry's GC horizon below that age they
  must be rejected;
- ``bad_lines`` malformed lines are appended to each log file.

The truth: ``joinable`` (click id -> query id: each must be output exactly
once), ``orphans`` and ``too_old`` (click ids that must come out unjoinable),
and ``now_ms``, the clock to judge ages by. Records are in arrival order, with
their arrival times, so tests can replay them as a stream.
"""

from __future__ import annotations

import json
import pathlib
import random
from dataclasses import dataclass, field

from transforms.records.photon_pb2 import ClickEvent, QueryEvent
from transforms.records.readers import to_json_dict

T0 = 1_767_571_200_000  # 2026-01-05T00:00Z
MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS

QUERIES_FILE = "queries.jsonl"
CLICKS_FILE = "clicks.jsonl"
TRUTH_FILE = "truth.json"
_BAD_LINES = (
    "{not json",
    '{"event_time": 1767571200000}',
    "[1, 2, 3]",
    '{"click_id": "", "query_id": "q", "event_time": "yesterday"}',
)


@dataclass(frozen=True)
class PhotonSpec:
    """Shape of the generated logs; times in milliseconds."""

    num_queries: int = 200
    start_ms: int = T0
    duration_ms: int = 60 * MINUTE_MS
    mean_clicks_per_query: float = 1.5
    max_click_delay_ms: int = 5 * MINUTE_MS
    late_query_fraction: float = 0.2
    max_query_log_delay_ms: int = 8 * MINUTE_MS
    max_click_log_delay_ms: int = 30_000
    duplicate_fraction: float = 0.1
    orphan_fraction: float = 0.05
    old_clicks: int = 0
    old_age_days: int = 10
    bad_lines: int = 0
    # Begins every query, click and record id: logs generated for one job
    # at different times (a live run that resumes) must not share ids.
    id_prefix: str = ""

    @property
    def clicks_per_query(self) -> float:
        """Click log records per query, on average: its clicks, the orphans
        that come with them, and the duplicates of both."""
        return (
            self.mean_clicks_per_query
            * (1 + self.orphan_fraction)
            * (1 + self.duplicate_fraction)
        )

    @property
    def now_ms(self) -> int:
        """The clock of the run: an hour after the last possible arrival."""
        return self.start_ms + self.duration_ms + 60 * MINUTE_MS


@dataclass
class PhotonLogs:
    """Generated logs in arrival order, with arrival times and the truth."""

    queries: list[QueryEvent] = field(default_factory=list)
    query_arrivals: list[int] = field(default_factory=list)
    clicks: list[ClickEvent] = field(default_factory=list)
    click_arrivals: list[int] = field(default_factory=list)
    joinable: dict[str, str] = field(default_factory=dict)
    orphans: set[str] = field(default_factory=set)
    too_old: set[str] = field(default_factory=set)
    duplicates: int = 0
    bad_lines: int = 0
    now_ms: int = 0

    def write(self, folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
        """Write both logs as JSON Lines and the truth; return the log paths."""
        folder.mkdir(parents=True, exist_ok=True)
        bad = [_BAD_LINES[i % len(_BAD_LINES)] for i in range(self.bad_lines)]
        queries = folder / QUERIES_FILE
        clicks = folder / CLICKS_FILE
        _write_lines(queries, [_line(q) for q in self.queries] + bad)
        _write_lines(clicks, [_line(c) for c in self.clicks] + bad)
        truth = {
            "joinable": self.joinable,
            "orphans": sorted(self.orphans),
            "too_old": sorted(self.too_old),
            "duplicates": self.duplicates,
            "bad_lines": 2 * self.bad_lines,
            "now_ms": self.now_ms,
        }
        (folder / TRUTH_FILE).write_text(json.dumps(truth, indent=1, sort_keys=True))
        return queries, clicks


def load_truth(path: pathlib.Path) -> dict:
    """The truth written by ``PhotonLogs.write`` (sets as sorted lists)."""
    return json.loads(pathlib.Path(path).read_text())


def generate(spec: PhotonSpec = PhotonSpec(), seed: int = 0) -> PhotonLogs:
    """The logs ``spec`` describes; the same seed gives the same logs."""
    rng = random.Random(seed)
    logs = PhotonLogs(now_ms=spec.now_ms, bad_lines=spec.bad_lines)
    queries: list[tuple[int, QueryEvent]] = []
    clicks: list[tuple[int, ClickEvent]] = []
    for n in range(spec.num_queries + spec.old_clicks):
        old = n >= spec.num_queries
        query = _query(rng, spec, n, old)
        queries.append((_query_arrival(rng, spec, query), query))
        count = 1 if old else _click_count(rng, spec.mean_clicks_per_query)
        for k in range(count):
            click = _click(rng, spec, query, f"{spec.id_prefix}c{n}-{k}")
            if old:
                logs.too_old.add(click.click_id)
            else:
                logs.joinable[click.click_id] = query.query_id
            clicks.append((_click_arrival(rng, spec, click), click))
    orphans = round(spec.orphan_fraction * len(clicks))
    for n in range(orphans):
        ghost = QueryEvent(
            query_id=f"{spec.id_prefix}ghost{n}", event_time=_served_at(rng, spec)
        )
        click = _click(rng, spec, ghost, f"{spec.id_prefix}orphan{n}")
        logs.orphans.add(click.click_id)
        clicks.append((_click_arrival(rng, spec, click), click))
    clicks += _duplicates(rng, spec, clicks)
    logs.duplicates = len(clicks) - len(logs.joinable) - orphans - len(logs.too_old)
    for arrival, query in sorted(queries, key=lambda p: p[0]):
        logs.queries.append(query)
        logs.query_arrivals.append(arrival)
    for arrival, click in sorted(clicks, key=lambda p: p[0]):
        logs.clicks.append(click)
        logs.click_arrivals.append(arrival)
    return logs


def _served_at(rng: random.Random, spec: PhotonSpec) -> int:
    return spec.start_ms + rng.randrange(spec.duration_ms)


def _query(rng: random.Random, spec: PhotonSpec, n: int, old: bool) -> QueryEvent:
    served = _served_at(rng, spec) - (spec.old_age_days * DAY_MS if old else 0)
    return QueryEvent(
        query_id=f"{spec.id_prefix}q{n}",
        event_time=served,
        query_text=f"query text {rng.randrange(50)}",
        advertiser_id=f"adv{rng.randrange(20)}",
        ad_id=f"ad{rng.randrange(100)}",
        record_id=f"{spec.id_prefix}qr{n}",
    )


def _click(
    rng: random.Random, spec: PhotonSpec, query: QueryEvent, click_id: str
) -> ClickEvent:
    return ClickEvent(
        click_id=click_id,
        query_id=query.query_id,
        event_time=query.event_time + rng.randrange(1, spec.max_click_delay_ms),
        ad_id=query.ad_id or "ad0",
        record_id=f"r-{click_id}",
    )


def _query_arrival(rng: random.Random, spec: PhotonSpec, query: QueryEvent) -> int:
    if rng.random() < spec.late_query_fraction:
        # Logged late: typically after some of its clicks have arrived.
        return query.event_time + rng.randrange(
            spec.max_click_delay_ms, spec.max_query_log_delay_ms + 1
        )
    return query.event_time + rng.randrange(1000)


def _click_arrival(rng: random.Random, spec: PhotonSpec, click: ClickEvent) -> int:
    return click.event_time + rng.randrange(spec.max_click_log_delay_ms)


def _click_count(rng: random.Random, mean: float) -> int:
    # Geometric with the given mean, at least one click per query so that
    # every query matters to the join.
    p = 1.0 / mean
    count = 1
    while rng.random() > p:
        count += 1
    return count


def _duplicates(
    rng: random.Random, spec: PhotonSpec, clicks: list[tuple[int, ClickEvent]]
) -> list[tuple[int, ClickEvent]]:
    copies = []
    for arrival, click in clicks:
        if rng.random() >= spec.duplicate_fraction:
            continue
        copy = ClickEvent()
        copy.CopyFrom(click)
        if rng.random() < 0.5:
            copy.record_id = click.record_id + "-relogged"
        copies.append((arrival + rng.randrange(1, 2 * MINUTE_MS), copy))
    return copies


def _line(message: QueryEvent | ClickEvent) -> str:
    return json.dumps(to_json_dict(message), separators=(",", ":"))


def _write_lines(path: pathlib.Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
