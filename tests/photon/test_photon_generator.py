"""The Photon log generator: deterministic, with the promised troubles."""

import json

from testing.photon_generator import PhotonSpec, generate


def test_same_seed_same_logs_and_another_seed_differs():
    first, again = generate(seed=3), generate(seed=3)
    assert first.clicks == again.clicks and first.queries == again.queries
    assert generate(seed=4).clicks != first.clicks


def test_logs_hold_every_case_the_join_must_handle():
    logs = generate(PhotonSpec(num_queries=300, old_clicks=3), seed=1)
    query_ids = {q.query_id for q in logs.queries}
    arrival = {
        q.query_id: at for q, at in zip(logs.queries, logs.query_arrivals, strict=True)
    }
    early = [
        c
        for c, at in zip(logs.clicks, logs.click_arrivals, strict=True)
        if c.query_id in arrival and at < arrival[c.query_id]
    ]
    assert early, "no click arrives before its query"
    ids = [c.click_id for c in logs.clicks]
    assert len(ids) - len(set(ids)) == logs.duplicates > 0
    assert logs.orphans and all(
        c.query_id not in query_ids for c in logs.clicks if c.click_id in logs.orphans
    )
    assert len(logs.too_old) == 3
    assert set(logs.joinable) | logs.orphans | logs.too_old == set(ids)
    assert logs.click_arrivals == sorted(logs.click_arrivals)


def test_written_logs_and_truth(tmp_path):
    logs = generate(PhotonSpec(num_queries=20, bad_lines=2), seed=2)
    queries, clicks = logs.write(tmp_path)
    assert len(queries.read_text().splitlines()) == len(logs.queries) + 2
    assert len(clicks.read_text().splitlines()) == len(logs.clicks) + 2
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["joinable"] == logs.joinable
    assert truth["bad_lines"] == 4
