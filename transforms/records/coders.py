"""Beam coders for the record messages.

Importing this module registers a `ProtoCoder` for every message class of
the generated modules (new messages included without an edit here), so
PCollections, state specs and shuffles of records encode them as their
protobuf wire form rather than falling back to pickling.
"""

from __future__ import annotations

from types import ModuleType

from apache_beam import coders
from google.protobuf.message import Message

from transforms.records import dead_letter_pb2, photon_pb2, zeitgeist_pb2


def _message_types(*modules: ModuleType) -> tuple[type[Message], ...]:
    return tuple(
        getattr(module, name)
        for module in modules
        for name in module.DESCRIPTOR.message_types_by_name
    )


MESSAGE_TYPES = _message_types(zeitgeist_pb2, photon_pb2, dead_letter_pb2)


def register_coders() -> None:
    """Register a `ProtoCoder` for each of `MESSAGE_TYPES` (idempotent)."""
    for message_type in MESSAGE_TYPES:
        coders.registry.register_coder(message_type, coders.ProtoCoder)


register_coders()
