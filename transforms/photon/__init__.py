"""Photon: joining a click stream with a query stream, each click exactly once.

``PhotonJoin`` is the composite; ``Joiner``, ``IdRegistry`` and
``EventStore`` are its parts (see each module). ``docs/photon.md`` describes
the design and its guarantees.
"""

from transforms.photon.composite import (
    DEAD_LETTERS,
    JOINED,
    OUTPUTS,
    UNJOINABLE,
    WASTED,
    PhotonJoin,
)
from transforms.photon.event_store import EventStore, WriteToEventStore
from transforms.photon.id_registry import ClickRef, IdRegistry, Outcome
from transforms.photon.joiner import Joiner
from transforms.photon.params import (
    BigtableTarget,
    JoinParams,
    RegistryLayout,
    RegistryParams,
)
from transforms.photon.registration import RegisterJoins
from transforms.photon.registry_gc import older_than_horizon

__all__ = [
    "DEAD_LETTERS",
    "JOINED",
    "OUTPUTS",
    "UNJOINABLE",
    "WASTED",
    "BigtableTarget",
    "ClickRef",
    "EventStore",
    "IdRegistry",
    "JoinParams",
    "Joiner",
    "Outcome",
    "PhotonJoin",
    "RegisterJoins",
    "RegistryLayout",
    "RegistryParams",
    "WriteToEventStore",
    "older_than_horizon",
]
