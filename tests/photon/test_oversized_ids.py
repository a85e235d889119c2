"""Ids Bigtable cannot hold are dead letters before anything is written.

Against the real emulator: a query id becomes an event-store row key (4 KiB
at most) and a click id a registry column qualifier (16 KiB at most).
"""

import pytest
from google.cloud.bigtable.data import ReadRowsQuery

from tests.photon.joining import (
    DAY,
    T0,
    click,
    expect,
    join,
    pipeline,
    query,
    target_of,
)
from transforms.photon import DEAD_LETTERS, JOINED, RegistryParams
from transforms.photon.id_registry import LAYOUT_ROW

pytestmark = pytest.mark.bigtable

LONG_QUERY_ID = "q" * 4096  # its row key adds a hash prefix: over 4 KiB
LONG_CLICK_ID = "c" * (16 * 1024 + 1)
LONGEST_CLICK_ID = "k" * (16 * 1024)  # exactly at the limit: fine


def stored(bigtable_instance, table_id):
    table = bigtable_instance.table(table_id)
    return [
        row for row in table.read_rows(ReadRowsQuery()) if row.row_key != LAYOUT_ROW
    ]


def test_ids_over_bigtable_limits_are_dead_letters_before_any_write(
    bigtable_instance,
):
    events = [
        query("q1", T0),
        query(LONG_QUERY_ID, T0),
        click("ok", "q1", T0 + 1),
        click(LONGEST_CLICK_ID, "q1", T0 + 2),
        click(LONG_CLICK_ID, "q1", T0 + 3),
        click("orphan-of-long", LONG_QUERY_ID, T0 + 4),
    ]
    with pipeline() as p:
        out = join(
            p,
            events,
            target_of(bigtable_instance),
            registry=RegistryParams(now_ms=T0 + DAY),
        )
        expect(
            out[JOINED],
            lambda j: j.click.click_id,
            ["ok", LONGEST_CLICK_ID],
            "Joined",
        )
        expect(
            out[DEAD_LETTERS],
            lambda d: (d.record_type, d.reason.split(" of ")[0].split(" is ")[0]),
            [
                ("QueryEvent", "field 'query_id' makes an event-store row key"),
                ("ClickEvent", "field 'query_id' makes an event-store row key"),
                ("ClickEvent", "field 'click_id'"),
            ],
            "Dead",
        )
    events_rows = stored(bigtable_instance, "events")
    assert len(events_rows) == 1  # q1 only
    registered = {
        cell.qualifier
        for row in stored(bigtable_instance, "id_registry")
        for cell in row.cells
    }
    assert registered == {b"ok", LONGEST_CLICK_ID.encode()}
