"""The driver JVM's class archive: built once, mapped by every session the
runner creates, ignored when absent."""

import subprocess
import sys

import pytest

from runners.spark import class_archive
from runners.spark.class_archive import CACHE_ENV, archive_path, with_class_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


def test_without_an_archive_the_driver_options_are_left_as_they_are(cache):
    assert not archive_path().exists()
    assert with_class_archive("-Xmx1g") == "-Xmx1g"
    assert with_class_archive("") == ""


def test_with_an_archive_the_driver_maps_it_quietly(cache):
    # An empty file stands in for the archive: only its presence is read
    # here (a JVM maps a real one in the test below).
    archive_path().touch()
    options = with_class_archive("-Xmx1g")
    assert options.startswith("-Xmx1g ")
    assert f"-XX:SharedArchiveFile={archive_path()}" in options
    assert "-Xlog:cds=off" in options


def test_an_archive_named_in_the_options_wins(cache):
    archive_path().touch()
    given = "-XX:SharedArchiveFile=/elsewhere.jsa"
    assert with_class_archive(given) == given
    recording = "-XX:ArchiveClassesAtExit=/new.jsa"
    assert with_class_archive(recording) == recording


def test_another_jdk_has_another_archive(cache, tmp_path_factory, monkeypatch):
    default = archive_path()
    other_jdk = tmp_path_factory.mktemp("jdk")
    (other_jdk / "bin").mkdir()
    (other_jdk / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(other_jdk))
    assert archive_path() != default
    assert archive_path().parent == cache


@pytest.mark.spark
@pytest.mark.slow
def test_the_built_archive_is_checked_and_put_in_place(tmp_path):
    # The README's set-up (setup.sh) builds the archive into the default
    # cache; a run without it builds it here, in the same place, where
    # every later session maps it. Each step runs in a fresh interpreter (it
    # starts JVMs of its own, and this process may hold a session), in a
    # folder of its own (where a JVM that fails to map writes its report).
    def step(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "runners.spark.class_archive", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )

    archive = archive_path()
    if not archive.exists():
        built = step()
        assert built.returncode == 0, built.stderr[-2000:]
        assert str(archive) in built.stdout
    # A real archive, and no temporary file of its build left beside it.
    assert archive.stat().st_size > 10 * 2**20
    assert not list(archive.parent.glob(f".{archive.name}.*"))
    # A JVM maps it or fails (-Xshare:on), as the build's own last step.
    checked = step("--check", str(archive))
    assert checked.returncode == 0, checked.stderr[-2000:]


@pytest.fixture
def broken_jdk(tmp_path_factory, monkeypatch):
    """A JDK whose java fails at once: spark-submit cannot start a driver."""
    broken = tmp_path_factory.mktemp("jdk")
    (broken / "bin").mkdir()
    java = broken / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 1\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(broken))


@pytest.mark.spark
def test_a_failed_build_leaves_no_archive_and_says_why(cache, broken_jdk):
    assert class_archive.main([]) == 1
    assert list(cache.iterdir()) == []
    # The failed step is named, with what it printed.
    with pytest.raises(class_archive.ArchiveNotBuilt, match="record step failed"):
        class_archive.build()


@pytest.mark.spark
def test_a_build_removes_what_killed_builds_left_and_no_running_builds_file(
    cache, broken_jdk
):
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "60"])
    name = archive_path().name
    killed = archive_path().with_name(f".{name}.{gone.pid}.tmp")
    running = archive_path().with_name(f".{name}.{alive.pid}.tmp")
    killed.touch()
    running.touch()
    try:
        with pytest.raises(class_archive.ArchiveNotBuilt):
            class_archive.build()
    finally:
        alive.kill()
        alive.wait()
    assert not killed.exists()
    # Its process is alive: the file may be a build still under way.
    assert running.exists()
