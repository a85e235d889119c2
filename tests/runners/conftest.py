"""One local[2] SparkSession shared by every Spark test of the session."""

from __future__ import annotations

import pytest

from runners.spark.options import SparkOptions
from runners.spark.session import get_or_create_session


@pytest.fixture(scope="session")
def spark_session():
    """A light local[2] session that SparkRunner pipelines reuse."""
    options = SparkOptions(
        [
            "--spark_master_url=local[2]",
            "--spark_default_parallelism=2",
            "--spark_conf=spark.sql.shuffle.partitions=2",
        ]
    )
    session = get_or_create_session(options)
    yield session
    session.stop()
