from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DeadLetter(_message.Message):
    __slots__ = ("source", "location", "raw", "reason", "record_type")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECORD_TYPE_FIELD_NUMBER: _ClassVar[int]
    source: str
    location: str
    raw: bytes
    reason: str
    record_type: str
    def __init__(self, source: _Optional[str] = ..., location: _Optional[str] = ..., raw: _Optional[bytes] = ..., reason: _Optional[str] = ..., record_type: _Optional[str] = ...) -> None: ...
