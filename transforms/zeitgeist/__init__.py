"""Zeitgeist: spike and dip detection over a stream of searches.

``Zeitgeist`` is the composite (``Zeitgeist(...).on_batches()`` over Arrow
tables in batch); ``CountWindows``, ``ModelCalculator`` and
``SpikeDipDetector`` are its stateful parts (see each module), configured by
the parameter classes of ``params``.
"""

from transforms.zeitgeist.composite import (
    ANOMALIES,
    LATE_RECORDS,
    WINDOW_COUNTS,
    Zeitgeist,
    ZeitgeistOnBatches,
)
from transforms.zeitgeist.model_calculator import ModelCalculator
from transforms.zeitgeist.params import (
    DetectorParams,
    ModelParams,
    ModelStoreConfig,
    WindowParams,
)
from transforms.zeitgeist.spike_dip_detector import SCORES, SpikeDipDetector
from transforms.zeitgeist.window_counter import CountWindows, WindowCounter

__all__ = [
    "ANOMALIES",
    "LATE_RECORDS",
    "SCORES",
    "WINDOW_COUNTS",
    "CountWindows",
    "DetectorParams",
    "ModelCalculator",
    "ModelParams",
    "ModelStoreConfig",
    "SpikeDipDetector",
    "WindowCounter",
    "WindowParams",
    "Zeitgeist",
    "ZeitgeistOnBatches",
]
