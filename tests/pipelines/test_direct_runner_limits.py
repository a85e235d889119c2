"""The Beam limitations behind the usage errors of `--follow` and
`--streaming` on the DirectRunner.

`pipelines.live.require_streaming_runner` refuses Beam's DirectRunner for a
followed directory, and for a streaming job over files. These tests pin
the reasons on the installed Beam: its bundle-based DirectRunner cannot
expand an unbounded splittable DoFn in streaming, Beam's own
`PeriodicImpulse` included, nor Zeitgeist's GroupByKeys over files. When a
Beam upgrade makes one fail, that limitation is gone and the flag can be
allowed there. The DirectRunner is the commands' (`runners.in_process`):
where GitHub answers, Beam's own would run these on Prism instead.
"""

import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from pipelines import zeitgeist, zeitgeist_flags
from pipelines.outputs import write_parts
from runners.in_process import InProcessDirectRunner


def test_beams_direct_runner_cannot_run_an_unbounded_splittable_dofn_live():
    start = time.time()
    pipeline = beam.Pipeline(
        runner="BundleBasedDirectRunner", options=PipelineOptions(["--streaming"])
    )
    _ = pipeline | PeriodicImpulse(
        start_timestamp=start, stop_timestamp=start + 2, fire_interval=1
    )
    with pytest.raises(RuntimeError, match="was not replaced as expected"):
        pipeline.run().wait_until_finish()


def test_beams_direct_runner_cannot_run_zeitgeist_over_files_in_streaming(tmp_path):
    log = tmp_path / "searches.jsonl"
    log.write_text('{"query": "q", "event_time": 1767571200000}\n')
    args, _ = zeitgeist_flags.parse_args(["--output", str(tmp_path)])
    transform = zeitgeist.zeitgeist_transform(zeitgeist_flags.load_config(args))
    pipeline = beam.Pipeline(
        runner=InProcessDirectRunner(), options=PipelineOptions(["--streaming"])
    )
    # As the command builds it in streaming: outputs written in parts.
    write = write_parts(flush_seconds=0)
    zeitgeist.build(pipeline, [str(log)], None, transform, tmp_path, [], write=write)
    with pytest.raises(RuntimeError, match="was not replaced as expected"):
        pipeline.run().wait_until_finish()
