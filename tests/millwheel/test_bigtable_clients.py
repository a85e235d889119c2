"""The project's Bigtable clients against the real emulator: the emulator is
logged once per process instead of warned about on every client."""

import logging
import warnings

import pytest

from transforms.millwheel import bigtable_clients
from transforms.millwheel.bigtable_clients import EMULATOR_WARNING, data_client
from transforms.millwheel.bigtable_tables import (
    MODELS_FAMILY,
    ensure_table,
    family_max_age,
    models_table,
)

pytestmark = pytest.mark.bigtable


def emulator_warnings(caught):
    return [w for w in caught if EMULATOR_WARNING in str(w.message)]


def test_google_clients_warn_against_the_emulator(bigtable_instance):
    # The premise of the module: without it, every client warns.
    from google.cloud.bigtable.data import BigtableDataClient

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BigtableDataClient(project=bigtable_instance.project).close()
    assert emulator_warnings(caught)


def test_clients_and_tables_log_the_emulator_once_and_do_not_warn(
    bigtable_instance, caplog
):
    project, instance = bigtable_instance.project, bigtable_instance.instance_id
    bigtable_clients._log_emulator.cache_clear()
    with (
        caplog.at_level(logging.INFO, logger=bigtable_clients.__name__),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        for _ in range(3):
            data_client(project).close()
        ensure_table(project, instance, models_table("fresh_models"))
        assert family_max_age(project, instance, "fresh_models", MODELS_FAMILY) is None
    assert emulator_warnings(caught) == []
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"Bigtable clients connect to the emulator at {bigtable_instance.host}"
    ]
    # Outside the clients, warnings are as the caller left them.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(f"{EMULATOR_WARNING} at elsewhere", RuntimeWarning, stacklevel=1)
    assert len(emulator_warnings(caught)) == 1
