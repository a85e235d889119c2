"""The parameters Zeitgeist's and Photon's state is kept under are declared
in the pipeline (`apply_with_state_params`), where a runner restarting from
a checkpoint can compare them (see `tests/runners/test_spark_streaming.py`
for the refusal)."""

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.millwheel.state_params import declared_state_params
from transforms.photon import BigtableTarget, JoinParams, PhotonJoin
from transforms.records.photon_pb2 import ClickEvent, QueryEvent
from transforms.records.zeitgeist_pb2 import SearchQuery
from transforms.zeitgeist import WindowParams, Zeitgeist


def _declared(pipeline: beam.Pipeline) -> dict[str, dict]:
    """Every transform's declared state parameters, by name; a composite
    applied with them and its primitive inside both carry them."""
    transforms = pipeline.to_runner_api().components.transforms.values()
    found = {t.unique_name: declared_state_params(t.annotations) for t in transforms}
    return {name: params for name, params in found.items() if params is not None}


def _streaming() -> beam.Pipeline:
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def test_zeitgeist_declares_its_window_size_where_state_is_kept():
    pipeline = _streaming()
    searches = pipeline | beam.Create([SearchQuery()])
    _ = searches | Zeitgeist(window=WindowParams(size_ms=600_000))
    declared = _declared(pipeline)
    assert declared["Zeitgeist/CountWindows/WindowCounter"] == {"window_ms": 600_000}
    assert declared["Zeitgeist/ModelCalculator"] == {"window_ms": 600_000}


def test_photon_declares_its_shards_timer_slot_and_token():
    pipeline = _streaming()
    queries = pipeline | "Queries" >> beam.Create([QueryEvent()])
    clicks = pipeline | "Clicks" >> beam.Create([ClickEvent()])
    join = JoinParams(shards=7, timer_slot_ms=30_000)
    _ = (queries, clicks) | PhotonJoin(BigtableTarget("p", "i"), "east", join)
    declared = _declared(pipeline)
    assert declared["PhotonJoin/Join"] == {"shards": 7, "timer_slot_ms": 30_000}
    assert declared["PhotonJoin/Register"] == {"pipeline_token": "east"}
