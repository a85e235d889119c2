"""Beam's TestStream-based suites, in streaming, on SparkRunner (local[2]).

Beam's tests build their pipelines with ``TestPipeline(options=...)`` or
``beam.Pipeline(options=...)`` and no runner, so they run on Beam's default
runner; the ``beam_suite_on_spark`` marker (``tests/conftest.py``) points
that default, and ``--test-pipeline-options``, at this runner for the
duration of each test. Every skip carries its reason.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import unittest

import apache_beam as beam
import pytest

for _needed in ("hamcrest", "tenacity", "mock"):
    pytest.importorskip(_needed, reason=f"Beam's suites need {_needed}")

from apache_beam.testing import test_stream_test  # noqa: E402
from apache_beam.transforms import userstate_test  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.beam_suite_on_spark]


# test name -> why it does not run on this runner.
SKIPS: dict[str, str] = {
    "test_generate_sequence_with_realtime_timer": (
        "pins --runner=DirectRunner in its own argv"
    ),
    "test_stateful_set_state_clean_portably": (
        "pins Beam's FnApiRunner (TestPipeline('FnApiRunner'))"
    ),
}


class _Skips:
    def setUp(self) -> None:
        reason = SKIPS.get(self._testMethodName)
        if reason:
            raise unittest.SkipTest(reason)
        super().setUp()


class SparkTestStreamTest(_Skips, test_stream_test.TestStreamTest):
    """Beam's ``TestStreamTest`` on SparkRunner."""


class _AppendToFile(beam.DoFn):
    """Records each element in a file that every worker process appends to
    (one ``write`` per record, so appends from processes do not interleave)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, element):
        data = pickle.dumps(element)
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, len(data).to_bytes(4, "big") + data)
        finally:
            os.close(fd)


class _RecordedElements(list):
    """``all_records`` of Beam's test: re-read from the file on every look,
    since the records are appended by Spark's worker processes."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def _load(self) -> None:
        records = []
        if os.path.exists(self._path):
            with open(self._path, "rb") as data:
                while size := data.read(4):
                    records.append(pickle.loads(data.read(int.from_bytes(size))))
        self[:] = records

    def __eq__(self, other) -> bool:
        self._load()
        return list(self) == other

    def __iter__(self):
        self._load()
        return iter(list.copy(self))

    def __len__(self) -> int:
        self._load()
        return list.__len__(self)

    def __repr__(self) -> str:
        self._load()
        return repr(list.copy(self))


class SparkStatefulDoFnTest(_Skips, userstate_test.StatefulDoFnOnDirectRunnerTest):
    """Beam's streaming state and timer tests on SparkRunner.

    Beam's versions collect results in a class attribute, which Spark's
    worker processes cannot update; here they go through a file instead,
    and the same assertions read it.
    """

    def setUp(self) -> None:
        super().setUp()
        handle, self._records = tempfile.mkstemp(prefix="userstate-records-")
        os.close(handle)
        os.unlink(self._records)
        userstate_test.StatefulDoFnOnDirectRunnerTest.all_records = _RecordedElements(
            self._records
        )

    def tearDown(self) -> None:
        if os.path.exists(self._records):
            os.unlink(self._records)
        super().tearDown()

    def record_dofn(self) -> beam.DoFn:
        return _AppendToFile(self._records)
