"""The committed *_pb2 modules are exactly what the pinned protoc makes."""

import pickle
from pathlib import Path

from transforms.records import generate

COMMITTED = Path(generate.__file__).parent


def test_generated_modules_match_the_proto_files(tmp_path):
    written = generate.generate(tmp_path)

    names = sorted(path.name for path in written)
    assert names == [
        "dead_letter_pb2.py",
        "dead_letter_pb2.pyi",
        "photon_pb2.py",
        "photon_pb2.pyi",
        "zeitgeist_pb2.py",
        "zeitgeist_pb2.pyi",
    ]
    for path in written:
        committed = COMMITTED / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} is stale: run `python -m transforms.records.generate`"
        )


def test_message_classes_live_in_importable_modules_so_they_pickle():
    # Beam pickles DoFns and falls back to pickling elements of untyped
    # PCollections; both need the class importable by its __module__.
    from transforms.records import ClickEvent, DeadLetter, SearchQuery

    for message in (
        SearchQuery(query="q", event_time=1700000000000),
        ClickEvent(click_id="c"),
        DeadLetter(raw=b"\xff"),
    ):
        assert type(message).__module__.startswith("transforms.records.")
        assert pickle.loads(pickle.dumps(message)) == message
