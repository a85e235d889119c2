from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryEvent(_message.Message):
    __slots__ = ("query_id", "event_time", "query_text", "advertiser_id", "ad_id", "record_id")
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    QUERY_TEXT_FIELD_NUMBER: _ClassVar[int]
    ADVERTISER_ID_FIELD_NUMBER: _ClassVar[int]
    AD_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    event_time: int
    query_text: str
    advertiser_id: str
    ad_id: str
    record_id: str
    def __init__(self, query_id: _Optional[str] = ..., event_time: _Optional[int] = ..., query_text: _Optional[str] = ..., advertiser_id: _Optional[str] = ..., ad_id: _Optional[str] = ..., record_id: _Optional[str] = ...) -> None: ...

class ClickEvent(_message.Message):
    __slots__ = ("click_id", "query_id", "event_time", "ad_id", "record_id")
    CLICK_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    AD_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    click_id: str
    query_id: str
    event_time: int
    ad_id: str
    record_id: str
    def __init__(self, click_id: _Optional[str] = ..., query_id: _Optional[str] = ..., event_time: _Optional[int] = ..., ad_id: _Optional[str] = ..., record_id: _Optional[str] = ...) -> None: ...

class JoinedClick(_message.Message):
    __slots__ = ("click", "query", "joined_at", "occurrence")
    CLICK_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    JOINED_AT_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCE_FIELD_NUMBER: _ClassVar[int]
    click: ClickEvent
    query: QueryEvent
    joined_at: int
    occurrence: str
    def __init__(self, click: _Optional[_Union[ClickEvent, _Mapping]] = ..., query: _Optional[_Union[QueryEvent, _Mapping]] = ..., joined_at: _Optional[int] = ..., occurrence: _Optional[str] = ...) -> None: ...

class UnjoinableClick(_message.Message):
    __slots__ = ("click", "reason", "detail")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REASON_UNSPECIFIED: _ClassVar[UnjoinableClick.Reason]
        QUERY_NOT_FOUND: _ClassVar[UnjoinableClick.Reason]
        OLDER_THAN_GC_HORIZON: _ClassVar[UnjoinableClick.Reason]
    REASON_UNSPECIFIED: UnjoinableClick.Reason
    QUERY_NOT_FOUND: UnjoinableClick.Reason
    OLDER_THAN_GC_HORIZON: UnjoinableClick.Reason
    CLICK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    click: ClickEvent
    reason: UnjoinableClick.Reason
    detail: str
    def __init__(self, click: _Optional[_Union[ClickEvent, _Mapping]] = ..., reason: _Optional[_Union[UnjoinableClick.Reason, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class JoinerEvent(_message.Message):
    __slots__ = ("query", "click")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CLICK_FIELD_NUMBER: _ClassVar[int]
    query: QueryEvent
    click: ClickEvent
    def __init__(self, query: _Optional[_Union[QueryEvent, _Mapping]] = ..., click: _Optional[_Union[ClickEvent, _Mapping]] = ...) -> None: ...

class JoinerState(_message.Message):
    __slots__ = ("query", "pending", "seen_click_ids", "gc_at", "occurrences")
    class OccurrencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    SEEN_CLICK_IDS_FIELD_NUMBER: _ClassVar[int]
    GC_AT_FIELD_NUMBER: _ClassVar[int]
    OCCURRENCES_FIELD_NUMBER: _ClassVar[int]
    query: QueryEvent
    pending: _containers.RepeatedCompositeFieldContainer[ClickEvent]
    seen_click_ids: _containers.RepeatedScalarFieldContainer[str]
    gc_at: int
    occurrences: _containers.ScalarMap[str, str]
    def __init__(self, query: _Optional[_Union[QueryEvent, _Mapping]] = ..., pending: _Optional[_Iterable[_Union[ClickEvent, _Mapping]]] = ..., seen_click_ids: _Optional[_Iterable[str]] = ..., gc_at: _Optional[int] = ..., occurrences: _Optional[_Mapping[str, str]] = ...) -> None: ...
