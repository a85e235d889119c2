"""Which Photon pipelines write their joins to an output directory.

`photon_verify` re-joins the clicks that are registered but in none of the
outputs it is given. Given the wrong directory (a typo, an empty folder,
another pipeline's output), every click of the right one looks lost, and
re-joining them outputs each twice. So the Photon command records its
pipeline id in its output directory (`RECORD`) once it holds the id and
before it registers a click, and the verifier re-joins only the clicks of
pipelines whose output it was given.

The record is a small JSON file beside the outputs, a list because one
directory may serve several pipeline ids over time.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

from transforms.records.durable_files import sync_directory, sync_file

RECORD = "photon_pipelines.json"


def record_pipeline(output: pathlib.Path, pipeline_id: str) -> None:
    """Adds `pipeline_id` to `output`'s record, written whole and renamed
    into place so that a reader never sees half of it."""
    ids = pipelines_of(output) or frozenset()
    if pipeline_id in ids:
        return
    text = json.dumps({"pipeline_ids": sorted(ids | {pipeline_id})}, indent=1)
    fd, temporary = tempfile.mkstemp(prefix=f".{RECORD}.", dir=output)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
        # The pipeline registers clicks once this returns: without the
        # record after a power loss, the verifier would refuse this output.
        sync_file(fh)
    os.replace(temporary, output / RECORD)
    sync_directory(output)


def pipelines_of(output: pathlib.Path) -> frozenset[str] | None:
    """The pipeline ids recorded in `output`; None when there is no record
    (not a Photon output, or one written before the record existed)."""
    try:
        text = (output / RECORD).read_text()
    except FileNotFoundError:
        return None
    try:
        return frozenset(json.loads(text)["pipeline_ids"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{output / RECORD} is damaged ({error!r})") from None
