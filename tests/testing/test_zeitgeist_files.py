"""`python -m testing.zeitgeist_files`: a generated stream dropped as files."""

import json

from testing.zeitgeist_files import main
from testing.zeitgeist_generator import DAY_MS, StreamSpec, generate


def test_the_stream_is_cut_into_parts_in_arrival_order(tmp_path):
    inbox = tmp_path / "inbox"
    main([str(inbox), "--days", "0.25", "--num_queries", "3", "--parts", "3"])
    stream = generate(StreamSpec(num_queries=3, duration_ms=DAY_MS // 4), seed=7)
    parts = sorted(inbox.iterdir())
    assert [p.name for p in parts] == [f"part-{i:05d}.jsonl" for i in range(3)]
    ids = [
        json.loads(line)["record_id"]
        for part in parts
        for line in part.read_text().splitlines()
    ]
    assert ids == [e.record_id for e in stream.events]
    # The ground truth sits beside the inbox, where no follower reads it.
    truth = json.loads((tmp_path / "inbox-episodes.json").read_text())
    assert [e["query"] for e in truth] == [e.query for e in stream.episodes]
