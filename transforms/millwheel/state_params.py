"""The parameters a stateful transform's state is kept under, declared in the
pipeline so that a restart under other values can be refused.

Persistent state means something only under the parameters that shaped it:
Zeitgeist's window size (a timer's tag is a window start, the window ends
one size later; the model's seasonal slots are windows), Photon's shard
count (which key holds a query id's clicks) and pipeline id (whose token
registered a click), a followed directory's pattern (its files read are
kept by path) and a streaming sink's path prefixes (its part numbers are
kept per prefix). A streaming job restarted from its checkpoint with
another `--window_seconds` or `join.shards` read the old state under the new
values: counts split and lost, clicks output twice. The runner cannot see
those values, which live inside pickled DoFns.

`apply_with_state_params` records them in the pipeline itself, as an
annotation of the transform (`STATE_PARAMS_ANNOTATION`, JSON), which every
runner carries in the pipeline proto. The project's SparkRunner keeps them
with a streaming checkpoint and refuses a restart whose values differ
(`runners/spark/checkpoint.py`); other runners ignore the annotation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import apache_beam as beam

#: The annotation key of a transform's declared state parameters.
STATE_PARAMS_ANNOTATION = "millwheel_state_params"


def apply_with_state_params(
    pcoll: beam.PCollection,
    label: str,
    transform: beam.PTransform,
    params: Mapping[str, Any],
):
    """``pcoll | label >> transform``, declaring ``params`` (JSON values) as
    the parameters the transform's state and timers are kept under."""
    encoded = json.dumps(dict(params), sort_keys=True)
    with pcoll.pipeline.transform_annotations(**{STATE_PARAMS_ANNOTATION: encoded}):
        return pcoll | label >> transform


def path_param(path: str) -> str:
    """A file path or pattern as a state parameter: a local one made
    absolute, so that the same files named from another working directory
    are the same value, and other files are not."""
    return path if "://" in path else os.path.abspath(path)


def declared_state_params(annotations: Mapping[str, bytes]) -> dict[str, Any] | None:
    """The state parameters in a transform's proto annotations, or None."""
    encoded = annotations.get(STATE_PARAMS_ANNOTATION)
    return None if encoded is None else json.loads(encoded)
