"""One alert per episode: opening, tracking and closing a query's episodes.

An episode opens in the window where the evidence first passes the
threshold: that `OPENED` record is the alert, emitted at once. While it is
open the detector tracks its peak (the window furthest from normal) and its
last abnormal window. It closes after `close_after_windows` windows in a row
with the evidence below half the threshold, and the `CLOSED` record carries
its start, end, peak, peak deviation and duration. Only then can the next
episode of the query open: a flapping query raises one alert, not one per
flap. An episode still open when the input ends gets the same summary with
the status `OPEN_AT_END`. The per-window detail stays in the score stream.
"""

from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    DetectorState,
    EpisodeStatus,
    ModelUpdate,
)
from transforms.zeitgeist.confidence import Verdict
from transforms.zeitgeist.params import DetectorParams


def advance(
    state: DetectorState, update: ModelUpdate, verdict: Verdict, params: DetectorParams
) -> Anomaly | None:
    """Move the query's episode on by one window (in place); return a record
    to emit: the alert of an episode that opens, or the summary of one that
    closes."""
    quiet = verdict.evidence < params.threshold / 2
    state.quiet_windows = state.quiet_windows + 1 if quiet else 0
    if not state.HasField("episode"):
        if verdict.kind is None:
            return None
        state.episode.CopyFrom(opened(update, verdict))
        state.episode_last_abnormal = update.window_start
        return _copy(state.episode)
    episode = state.episode
    if verdict.kind is not None:
        state.episode_last_abnormal = update.window_start
    if abs(update.deviation) > episode.peak_deviation:
        _set_peak(episode, update)
    episode.score = max(episode.score, verdict.score)
    if state.quiet_windows < params.close_after_windows:
        return None
    return _end_episode(state, EpisodeStatus.CLOSED)


def ended_open(state: DetectorState) -> Anomaly | None:
    """The summary of the episode still open when the input has ended, if
    any (and the state without it)."""
    if not state.HasField("episode"):
        return None
    return _end_episode(state, EpisodeStatus.OPEN_AT_END)


def _end_episode(state: DetectorState, status: int) -> Anomaly:
    """The open episode's summary; the query has no open episode after it."""
    episode = state.episode
    # The episode keeps its opening window's bounds until it is summarised.
    window_ms = episode.window_end - episode.window_start
    summary = _copy(episode)
    summary.status = status
    summary.episode_end = state.episode_last_abnormal + window_ms
    summary.window_end = summary.episode_end
    summary.duration_windows = (
        summary.episode_end - summary.episode_start
    ) // window_ms
    summary.actual = episode.peak_actual
    summary.expected = episode.peak_expected
    state.ClearField("episode")
    state.ClearField("episode_last_abnormal")
    return summary


def opened(update: ModelUpdate, verdict: Verdict) -> Anomaly:
    """The alert: the window where the evidence passed the threshold."""
    anomaly = Anomaly(
        query=update.query,
        kind=AnomalyKind.Value(verdict.kind),
        window_start=update.window_start,
        window_end=update.window_end,
        actual=update.actual,
        expected=update.expected,
        score=verdict.score,
        revision=update.revision,
        status=EpisodeStatus.OPENED,
        episode_start=update.window_start,
        duration_windows=1,
    )
    _set_peak(anomaly, update)
    return anomaly


def amended(update: ModelUpdate, verdict: Verdict) -> Anomaly:
    """A corrected window found abnormal: an episode of that window alone."""
    anomaly = opened(update, verdict)
    anomaly.status = EpisodeStatus.AMENDED
    anomaly.episode_end = update.window_end
    return anomaly


def _set_peak(anomaly: Anomaly, update: ModelUpdate) -> None:
    anomaly.peak_window_start = update.window_start
    anomaly.peak_deviation = abs(update.deviation)
    anomaly.peak_actual = update.actual
    anomaly.peak_expected = update.expected


def _copy(anomaly: Anomaly) -> Anomaly:
    copy = Anomaly()
    copy.CopyFrom(anomaly)
    return copy
