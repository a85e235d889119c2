from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AnomalyKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANOMALY_KIND_UNSPECIFIED: _ClassVar[AnomalyKind]
    SPIKE: _ClassVar[AnomalyKind]
    DIP: _ClassVar[AnomalyKind]

class EpisodeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPISODE_STATUS_UNSPECIFIED: _ClassVar[EpisodeStatus]
    OPENED: _ClassVar[EpisodeStatus]
    CLOSED: _ClassVar[EpisodeStatus]
    AMENDED: _ClassVar[EpisodeStatus]
    OPEN_AT_END: _ClassVar[EpisodeStatus]
ANOMALY_KIND_UNSPECIFIED: AnomalyKind
SPIKE: AnomalyKind
DIP: AnomalyKind
EPISODE_STATUS_UNSPECIFIED: EpisodeStatus
OPENED: EpisodeStatus
CLOSED: EpisodeStatus
AMENDED: EpisodeStatus
OPEN_AT_END: EpisodeStatus

class SearchQuery(_message.Message):
    __slots__ = ("query", "event_time", "record_id", "count")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    query: str
    event_time: int
    record_id: str
    count: int
    def __init__(self, query: _Optional[str] = ..., event_time: _Optional[int] = ..., record_id: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class WindowCount(_message.Message):
    __slots__ = ("query", "window_start", "window_end", "count", "revision", "previous_window_start")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    query: str
    window_start: int
    window_end: int
    count: int
    revision: int
    previous_window_start: int
    def __init__(self, query: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., count: _Optional[int] = ..., revision: _Optional[int] = ..., previous_window_start: _Optional[int] = ...) -> None: ...

class ModelUpdate(_message.Message):
    __slots__ = ("query", "window_start", "window_end", "actual", "expected", "stddev", "revision", "history", "previous_window_start", "deviation", "new_normal", "least_deviation")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_FIELD_NUMBER: _ClassVar[int]
    NEW_NORMAL_FIELD_NUMBER: _ClassVar[int]
    LEAST_DEVIATION_FIELD_NUMBER: _ClassVar[int]
    query: str
    window_start: int
    window_end: int
    actual: int
    expected: float
    stddev: float
    revision: int
    history: int
    previous_window_start: int
    deviation: float
    new_normal: bool
    least_deviation: float
    def __init__(self, query: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., stddev: _Optional[float] = ..., revision: _Optional[int] = ..., history: _Optional[int] = ..., previous_window_start: _Optional[int] = ..., deviation: _Optional[float] = ..., new_normal: _Optional[bool] = ..., least_deviation: _Optional[float] = ...) -> None: ...

class ModelState(_message.Message):
    __slots__ = ("history", "last_window_start", "excursion", "level", "level_spread", "level_error", "season_roots", "season_offset", "season_spread", "season_error", "excursion_sum", "week_roots", "week_offset", "week_spread", "week_error")
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    LAST_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    EXCURSION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    LEVEL_SPREAD_FIELD_NUMBER: _ClassVar[int]
    LEVEL_ERROR_FIELD_NUMBER: _ClassVar[int]
    SEASON_ROOTS_FIELD_NUMBER: _ClassVar[int]
    SEASON_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SEASON_SPREAD_FIELD_NUMBER: _ClassVar[int]
    SEASON_ERROR_FIELD_NUMBER: _ClassVar[int]
    EXCURSION_SUM_FIELD_NUMBER: _ClassVar[int]
    WEEK_ROOTS_FIELD_NUMBER: _ClassVar[int]
    WEEK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WEEK_SPREAD_FIELD_NUMBER: _ClassVar[int]
    WEEK_ERROR_FIELD_NUMBER: _ClassVar[int]
    history: int
    last_window_start: int
    excursion: int
    level: float
    level_spread: float
    level_error: float
    season_roots: _containers.RepeatedScalarFieldContainer[float]
    season_offset: float
    season_spread: float
    season_error: float
    excursion_sum: float
    week_roots: _containers.RepeatedScalarFieldContainer[float]
    week_offset: float
    week_spread: float
    week_error: float
    def __init__(self, history: _Optional[int] = ..., last_window_start: _Optional[int] = ..., excursion: _Optional[int] = ..., level: _Optional[float] = ..., level_spread: _Optional[float] = ..., level_error: _Optional[float] = ..., season_roots: _Optional[_Iterable[float]] = ..., season_offset: _Optional[float] = ..., season_spread: _Optional[float] = ..., season_error: _Optional[float] = ..., excursion_sum: _Optional[float] = ..., week_roots: _Optional[_Iterable[float]] = ..., week_offset: _Optional[float] = ..., week_spread: _Optional[float] = ..., week_error: _Optional[float] = ...) -> None: ...

class Anomaly(_message.Message):
    __slots__ = ("query", "kind", "window_start", "window_end", "actual", "expected", "score", "revision", "status", "episode_start", "episode_end", "peak_window_start", "peak_deviation", "peak_actual", "peak_expected", "duration_windows")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_START_FIELD_NUMBER: _ClassVar[int]
    EPISODE_END_FIELD_NUMBER: _ClassVar[int]
    PEAK_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    PEAK_DEVIATION_FIELD_NUMBER: _ClassVar[int]
    PEAK_ACTUAL_FIELD_NUMBER: _ClassVar[int]
    PEAK_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    DURATION_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    query: str
    kind: AnomalyKind
    window_start: int
    window_end: int
    actual: int
    expected: float
    score: float
    revision: int
    status: EpisodeStatus
    episode_start: int
    episode_end: int
    peak_window_start: int
    peak_deviation: float
    peak_actual: int
    peak_expected: float
    duration_windows: int
    def __init__(self, query: _Optional[str] = ..., kind: _Optional[_Union[AnomalyKind, str]] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., score: _Optional[float] = ..., revision: _Optional[int] = ..., status: _Optional[_Union[EpisodeStatus, str]] = ..., episode_start: _Optional[int] = ..., episode_end: _Optional[int] = ..., peak_window_start: _Optional[int] = ..., peak_deviation: _Optional[float] = ..., peak_actual: _Optional[int] = ..., peak_expected: _Optional[float] = ..., duration_windows: _Optional[int] = ...) -> None: ...

class DetectorState(_message.Message):
    __slots__ = ("spike", "dip", "evidence_mean", "last_window_start", "quiet_windows", "episode", "episode_last_abnormal", "deviation_record", "value_high", "value_low", "far_share", "deviation_products", "deviation_squares", "deviation_pairs", "previous_deviation", "previous_deviation_start", "visited_bin_log2", "visited_base", "visited_bins")
    SPIKE_FIELD_NUMBER: _ClassVar[int]
    DIP_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_MEAN_FIELD_NUMBER: _ClassVar[int]
    LAST_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    QUIET_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FIELD_NUMBER: _ClassVar[int]
    EPISODE_LAST_ABNORMAL_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_RECORD_FIELD_NUMBER: _ClassVar[int]
    VALUE_HIGH_FIELD_NUMBER: _ClassVar[int]
    VALUE_LOW_FIELD_NUMBER: _ClassVar[int]
    FAR_SHARE_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_PRODUCTS_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_SQUARES_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_PAIRS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DEVIATION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_DEVIATION_START_FIELD_NUMBER: _ClassVar[int]
    VISITED_BIN_LOG2_FIELD_NUMBER: _ClassVar[int]
    VISITED_BASE_FIELD_NUMBER: _ClassVar[int]
    VISITED_BINS_FIELD_NUMBER: _ClassVar[int]
    spike: float
    dip: float
    evidence_mean: float
    last_window_start: int
    quiet_windows: int
    episode: Anomaly
    episode_last_abnormal: int
    deviation_record: float
    value_high: float
    value_low: float
    far_share: float
    deviation_products: float
    deviation_squares: float
    deviation_pairs: int
    previous_deviation: float
    previous_deviation_start: int
    visited_bin_log2: int
    visited_base: int
    visited_bins: bytes
    def __init__(self, spike: _Optional[float] = ..., dip: _Optional[float] = ..., evidence_mean: _Optional[float] = ..., last_window_start: _Optional[int] = ..., quiet_windows: _Optional[int] = ..., episode: _Optional[_Union[Anomaly, _Mapping]] = ..., episode_last_abnormal: _Optional[int] = ..., deviation_record: _Optional[float] = ..., value_high: _Optional[float] = ..., value_low: _Optional[float] = ..., far_share: _Optional[float] = ..., deviation_products: _Optional[float] = ..., deviation_squares: _Optional[float] = ..., deviation_pairs: _Optional[int] = ..., previous_deviation: _Optional[float] = ..., previous_deviation_start: _Optional[int] = ..., visited_bin_log2: _Optional[int] = ..., visited_base: _Optional[int] = ..., visited_bins: _Optional[bytes] = ...) -> None: ...

class WindowScore(_message.Message):
    __slots__ = ("query", "window_start", "window_end", "actual", "expected", "stddev", "score", "spike_confidence", "dip_confidence", "revision", "history", "deviation")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SPIKE_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    DIP_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    DEVIATION_FIELD_NUMBER: _ClassVar[int]
    query: str
    window_start: int
    window_end: int
    actual: int
    expected: float
    stddev: float
    score: float
    spike_confidence: float
    dip_confidence: float
    revision: int
    history: int
    deviation: float
    def __init__(self, query: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., stddev: _Optional[float] = ..., score: _Optional[float] = ..., spike_confidence: _Optional[float] = ..., dip_confidence: _Optional[float] = ..., revision: _Optional[int] = ..., history: _Optional[int] = ..., deviation: _Optional[float] = ...) -> None: ...
