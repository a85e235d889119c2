from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AnomalyKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANOMALY_KIND_UNSPECIFIED: _ClassVar[AnomalyKind]
    SPIKE: _ClassVar[AnomalyKind]
    DIP: _ClassVar[AnomalyKind]
ANOMALY_KIND_UNSPECIFIED: AnomalyKind
SPIKE: AnomalyKind
DIP: AnomalyKind

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
    __slots__ = ("query", "window_start", "window_end", "actual", "expected", "stddev", "revision", "history", "previous_window_start")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    query: str
    window_start: int
    window_end: int
    actual: int
    expected: float
    stddev: float
    revision: int
    history: int
    previous_window_start: int
    def __init__(self, query: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., stddev: _Optional[float] = ..., revision: _Optional[int] = ..., history: _Optional[int] = ..., previous_window_start: _Optional[int] = ...) -> None: ...

class ModelState(_message.Message):
    __slots__ = ("level", "trend", "variance", "history", "last_window_start", "seasonal", "excursion")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    TREND_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    LAST_WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    SEASONAL_FIELD_NUMBER: _ClassVar[int]
    EXCURSION_FIELD_NUMBER: _ClassVar[int]
    level: float
    trend: float
    variance: float
    history: int
    last_window_start: int
    seasonal: _containers.RepeatedScalarFieldContainer[float]
    excursion: int
    def __init__(self, level: _Optional[float] = ..., trend: _Optional[float] = ..., variance: _Optional[float] = ..., history: _Optional[int] = ..., last_window_start: _Optional[int] = ..., seasonal: _Optional[_Iterable[float]] = ..., excursion: _Optional[int] = ...) -> None: ...

class Anomaly(_message.Message):
    __slots__ = ("query", "kind", "window_start", "window_end", "actual", "expected", "score", "revision")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    query: str
    kind: AnomalyKind
    window_start: int
    window_end: int
    actual: int
    expected: float
    score: float
    revision: int
    def __init__(self, query: _Optional[str] = ..., kind: _Optional[_Union[AnomalyKind, str]] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., score: _Optional[float] = ..., revision: _Optional[int] = ...) -> None: ...

class WindowScore(_message.Message):
    __slots__ = ("query", "window_start", "window_end", "actual", "expected", "stddev", "score", "spike_confidence", "dip_confidence", "revision", "history")
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
    def __init__(self, query: _Optional[str] = ..., window_start: _Optional[int] = ..., window_end: _Optional[int] = ..., actual: _Optional[int] = ..., expected: _Optional[float] = ..., stddev: _Optional[float] = ..., score: _Optional[float] = ..., spike_confidence: _Optional[float] = ..., dip_confidence: _Optional[float] = ..., revision: _Optional[int] = ..., history: _Optional[int] = ...) -> None: ...
