"""Which Photon pipelines write their joins to an output directory.

`photon_verify` re-joins the clicks that are registered but in none of the
outputs it is given. Given the wrong directory (a typo, an empty folder,
another pipeline's output), every click of the right one looks lost, and
re-joining them outputs each twice. So the Photon command records its
pipeline id in its output directory (`RECORD`) once it holds the id and
before it registers a click, and the verifier re-joins only the clicks of
pipelines whose output it was given.

The record is a small JSON file beside the outputs: a list of ids, because
one directory may serve several pipeline ids over time, and the directory's
own random id (`output_id`). A pipeline's lease keeps, in the id registry,
the output ids it has written to (`pipeline_lease.outputs_written`), so
the verifier can tell this pipeline's output from an older one of the same
id, or one written against another registry.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import uuid

from transforms.records.durable_files import sync_directory, sync_file

RECORD = "photon_pipelines.json"


def record_pipeline(output: pathlib.Path, pipeline_id: str) -> None:
    """Adds `pipeline_id` to `output`'s record."""
    ids = pipelines_of(output) or frozenset()
    if pipeline_id not in ids:
        _write(output, output_id(output), ids | {pipeline_id})


def output_id(output: pathlib.Path) -> str:
    """`output`'s own id, made and recorded the first time it is asked for."""
    recorded = _read(output)
    if recorded is not None and "output_id" in recorded:
        return recorded["output_id"]
    made = uuid.uuid4().hex
    _write(output, made, pipelines_of(output) or frozenset())
    return made


def output_id_of(output: pathlib.Path) -> str | None:
    """`output`'s id; None if none was recorded (no record, or one written
    before output ids existed)."""
    recorded = _read(output)
    return None if recorded is None else recorded.get("output_id")


def pipelines_of(output: pathlib.Path) -> frozenset[str] | None:
    """The pipeline ids recorded in `output`; None when there is no record
    (not a Photon output, or one written before the record existed)."""
    recorded = _read(output)
    return None if recorded is None else frozenset(recorded["pipeline_ids"])


def _read(output: pathlib.Path) -> dict | None:
    try:
        text = (output / RECORD).read_text()
    except FileNotFoundError:
        return None
    try:
        recorded = json.loads(text)
        frozenset(recorded["pipeline_ids"])
        if not isinstance(recorded.get("output_id", ""), str):
            raise TypeError("output_id is not a string")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{output / RECORD} is damaged ({error!r})") from None
    return recorded


def _write(output: pathlib.Path, made_id: str, ids: frozenset[str]) -> None:
    """Writes the record whole and renames it into place, so that a reader
    never sees half of it."""
    text = json.dumps({"output_id": made_id, "pipeline_ids": sorted(ids)}, indent=1)
    fd, temporary = tempfile.mkstemp(prefix=f".{RECORD}.", dir=output)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
        # The pipeline registers clicks once this returns: without the
        # record after a power loss, the verifier would refuse this output.
        sync_file(fh)
    os.replace(temporary, output / RECORD)
    sync_directory(output)
