"""Suite-wide fixtures: the Bigtable emulator (``testing.fixtures``), one
local[2] SparkSession, one standalone Spark cluster, and the
``both_runners`` marker.

A module marked ``both_runners`` runs each of its tests twice: on Beam's
DirectRunner (kept in process: ``runners.in_process``) and on this
project's SparkRunner, with the same assertions.
Its pipelines are built without a runner (``TestPipeline(options=...)`` or
``beam.Pipeline(options=...)``), so the fixture points Beam's default runner
at the one the test is parametrised with.

A module marked ``beam_suite_on_spark`` runs Beam's own test classes in
streaming on SparkRunner: Beam's default runner, and the runner and
``--streaming`` that ``TestPipeline()`` reads from
``--test-pipeline-options``, point at this runner.

Test files holding a test marked ``slow`` run first (see
``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline

from runners.in_process import IN_PROCESS_DIRECT_RUNNER

pytest_plugins = ["testing.fixtures"]

SPARK_RUNNER = "runners.spark.SparkRunner"


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "both_runners: run on the DirectRunner and on SparkRunner"
    )
    config.addinivalue_line(
        "markers", "beam_suite_on_spark: Beam's test classes, streaming, on SparkRunner"
    )
    # Marks Beam's own test modules use (its CI reads them); the suites run
    # here import those modules, and each worker would warn of each mark.
    for beam_mark in ("no_sickbay_batch", "no_sickbay_streaming", "no_xdist"):
        config.addinivalue_line("markers", f"{beam_mark}: Beam's own test mark")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items) -> None:
    """Files holding a ``slow`` test first, then the others; most tests
    first within each group, as xdist would order them.

    xdist's ``--dist loadfile`` hands out whole files in this order
    (``--no-loadscope-reorder`` in pyproject.toml). Its own order, most
    tests first, put the files of one or two long fault tests (kills,
    restarts, a standalone cluster: 1 to 3 min a file) last, and whichever
    worker drew the last of them ran it while the other had nothing left.
    Replaying xdist's assignment on measured durations (2026-11-27, each
    file's time varied at random), the run lasted 20 s longer than an even
    split of the work on average, up to 2 min; in this order 1 s, up to
    20 s. Trylast: after ``-m`` has deselected what will not run."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def rank(path: str) -> tuple[bool, int]:
        tests = files[path]
        return (not any(t.get_closest_marker("slow") for t in tests), -len(tests))

    items[:] = [item for path in sorted(files, key=rank) for item in files[path]]


def pytest_generate_tests(metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_runners"):
        metafunc.fixturenames.append("beam_runner")
        metafunc.parametrize(
            "beam_runner", ["direct", pytest.param("spark", marks=pytest.mark.spark)]
        )


@pytest.fixture(scope="session")
def spark_session():
    """A light local[2] session that SparkRunner pipelines reuse."""
    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

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


@pytest.fixture(scope="session")
def spark_cluster():
    """A standalone master and a worker (2 cores, 2g) on 127.0.0.1, started
    on first use and shared: a start costs 7 to 15 s, and each test's job
    is an application of its own, with executors of its own, so the tests
    that use it see nothing of each other but the master."""
    from testing.spark_cluster import SparkStandaloneCluster

    with SparkStandaloneCluster(cores=2, memory="2g") as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _default_runner(request, monkeypatch):
    """Points Beam's default runner at the one a ``both_runners`` test is
    parametrised with; for the others, and the DirectRunner's turn, at the
    DirectRunner kept in process (`runners.in_process`), as the commands
    run it: Beam's own would try to download Prism first."""
    monkeypatch.setattr(StandardOptions, "DEFAULT_RUNNER", IN_PROCESS_DIRECT_RUNNER)
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("beam_runner") == "spark":
        request.getfixturevalue("spark_session")
        monkeypatch.setattr(StandardOptions, "DEFAULT_RUNNER", SPARK_RUNNER)
    if request.node.get_closest_marker("beam_suite_on_spark"):
        request.getfixturevalue("spark_session")
        monkeypatch.setattr(StandardOptions, "DEFAULT_RUNNER", SPARK_RUNNER)
        monkeypatch.setattr(
            TestPipeline,
            "pytest_test_pipeline_options",
            f"--runner={SPARK_RUNNER} --streaming",
        )


@pytest.fixture
def small_disk_dir(tmp_path):
    """A 1 MiB tmpfs: a real file system that really runs out of space
    (`testing.small_disk`); the test is skipped, with the reason, where
    this machine does not let it be mounted."""
    from testing import small_disk

    try:
        path = small_disk.mount(tmp_path / "disk", kib=1024)
    except small_disk.SmallDiskUnavailable as unavailable:
        pytest.skip(str(unavailable))
    yield path
    small_disk.unmount(path)
