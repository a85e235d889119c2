"""Record schemas of Zeitgeist and Photon, their Beam coders, and parsing.

Messages are generated from the `.proto` files here (see `generate`).
Importing this package registers a `ProtoCoder` for each message class.
Parsing and validation live in `parse`, file readers with dead letters in
`readers`.
"""

from transforms.records import coders as _coders  # noqa: F401  registers coders
from transforms.records.dead_letter_pb2 import DeadLetter
from transforms.records.photon_pb2 import (
    ClickEvent,
    JoinedClick,
    QueryEvent,
    UnjoinableClick,
)
from transforms.records.zeitgeist_pb2 import (
    Anomaly,
    AnomalyKind,
    ModelUpdate,
    SearchQuery,
    WindowCount,
    WindowScore,
)

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "ClickEvent",
    "DeadLetter",
    "JoinedClick",
    "ModelUpdate",
    "QueryEvent",
    "SearchQuery",
    "UnjoinableClick",
    "WindowCount",
    "WindowScore",
]
