"""A class-data archive for the driver's JVM, so that Spark starts sooner.

Most of a local job's start is the JVM's: loading and verifying Spark's
classes took 5 to 6 seconds of a 1M-search CLI run's 9 to 10 on a two-core
machine. Java's class-data sharing maps them from an archive instead; with
one, the same session started in 2.7 to 3.3 seconds.

The archive is built once, by ``python -m runners.spark.class_archive``
(``setup.sh`` runs it): a local session runs a small Beam pipeline with
``-XX:ArchiveClassesAtExit``, its JVM writes the classes it loaded as it
exits (about 110 MB, in about half a minute), and a second session checks
that a JVM starts with it mapped before it is put in place. An archive cut short
crashes the JVM that maps it, so it is written under a temporary name and
renamed only once checked.

The driver of every session the runner creates maps the archive when one
is there (``-XX:SharedArchiveFile``, see ``session.py``). Its name holds a
digest of the JDK and of Spark's jars, so after an upgrade of either no
archive is found (and the JVM starts as before) until it is built again.
It lives in ``$MILLWHEEL_BEAM_CACHE``, else ``$XDG_CACHE_HOME/millwheel-beam``,
else ``~/.cache/millwheel-beam``; deleting it turns it off.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CACHE_ENV = "MILLWHEEL_BEAM_CACHE"
_MODULE = "runners.spark.class_archive"
_MAP = "-XX:SharedArchiveFile="
_RECORD = "-XX:ArchiveClassesAtExit="
# Class-data sharing's own messages (classes it cannot archive, an archive
# it cannot map) are no news to a job: it starts either way.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Lines of a failed step's output that its error shows.
_TAIL_LINES = 20
# Seconds a JVM may take to write the archive as it exits.
_EXIT_SECONDS = 600


def cache_folder() -> Path:
    """Where the archive is kept."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "millwheel-beam"


def archive_path() -> Path:
    """The archive for this JDK and these Spark jars (it may not exist)."""
    return cache_folder() / f"spark-driver-{_digest()}.jsa"


def with_class_archive(java_options: str) -> str:
    """The driver's Java options, with the archive mapped if there is one
    and the options do not name an archive already."""
    if _MAP in java_options or _RECORD in java_options:
        return java_options
    archive = archive_path()
    if not archive.is_file():
        return java_options
    return f"{java_options} {_MAP}{archive} {_QUIET}".strip()


def _java() -> Path | None:
    # The java that spark-submit starts: JAVA_HOME's, else the one on PATH.
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _digest() -> str:
    import pyspark

    identity = hashlib.sha256()
    java = _java()
    jars = Path(pyspark.__file__).parent / "jars"
    files = ([java] if java else []) + sorted(jars.glob("*.jar"))
    for path in files:
        stat = path.stat()
        identity.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return identity.hexdigest()[:16]


class ArchiveNotBuilt(RuntimeError):
    """A step of the build failed; the message ends with its last output."""

    def __init__(self, step: str, output: str) -> None:
        tail = "\n".join(output.strip().splitlines()[-_TAIL_LINES:])
        super().__init__(f"the {step} step failed:\n{tail}")


def build() -> Path:
    """Record, check and put in place the archive; return its path."""
    target = archive_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_killed_builds(target)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # The steps run in a folder of their own: a JVM that crashes on a bad
    # archive writes its report (hs_err_pid*.log) where it runs.
    with tempfile.TemporaryDirectory() as scratch:
        try:
            for step in ("--record", "--check"):
                _run_step(step, temporary, Path(scratch))
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
    return target


def _remove_killed_builds(target: Path) -> None:
    """Deletes what builds killed before their clean-up left: a temporary
    archive of about 120 MB each, named after a process no longer alive."""
    for leftover in target.parent.glob(f".{target.name}.*.tmp"):
        pid = leftover.name.rsplit(".", 2)[-2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)


def _run_step(step: str, archive: Path, folder: Path) -> None:
    # Spark's start-up warnings are kept out of set-up's output, and shown
    # only if the step fails.
    done = subprocess.run(
        [sys.executable, "-m", _MODULE, step, str(archive)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": _with_project(os.environ.get("PYTHONPATH"))},
    )
    if done.returncode != 0:
        raise ArchiveNotBuilt(step.lstrip("-"), done.stderr)


def _with_project(python_path: str | None) -> str:
    """`python_path` with this project's root first: the steps run away
    from the current folder, which may be what made it importable."""
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([root, python_path] if python_path else [root])


def add_small_job(pipeline) -> None:
    """A small job with the steps whose classes a Spark job's JVM loads: a
    `Create`, a combine, a shuffle, a side input."""
    import apache_beam as beam

    numbers = pipeline | beam.Create(range(1000))
    total = numbers | beam.CombineGlobally(sum)
    _ = (
        numbers
        | beam.Map(lambda n: (n % 7, n))
        | beam.GroupByKey()
        | beam.Map(lambda kv, t: sum(kv[1]) / t, beam.pvalue.AsSingleton(total))
    )


def _run_session(java_options: str) -> None:
    """A local session whose driver has `java_options` runs
    `add_small_job`, then its JVM exits, writing an archive if asked to."""
    import apache_beam as beam
    from pyspark import SparkContext

    from runners.spark import SparkRunner
    from runners.spark.options import SparkOptions
    from runners.spark.session import get_or_create_session

    options = SparkOptions(
        [
            "--spark_master_url=local[2]",
            f"--spark_conf=spark.driver.extraJavaOptions={java_options}",
        ]
    )
    session = get_or_create_session(options)
    with beam.Pipeline(runner=SparkRunner(), options=options) as pipeline:
        add_small_job(pipeline)
    session.stop()
    # The JVM exits when its standard input closes, and writes the archive
    # then: wait for it, or this process would end before the file does.
    gateway = SparkContext._gateway.proc
    gateway.stdin.close()
    if gateway.wait(timeout=_EXIT_SECONDS) != 0:
        raise RuntimeError(f"the driver's JVM exited with {gateway.returncode}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    step.add_argument("--check", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record:
        _run_session(f"{_RECORD}{args.record} {_QUIET}")
        if not args.record.is_file():
            raise RuntimeError("the driver's JVM wrote no class archive")
        return 0
    if args.check:
        # -Xshare:on: a JVM that cannot map the archive fails, rather than
        # start without it as a job's would.
        _run_session(f"{_MAP}{args.check} -Xshare:on {_QUIET}")
        return 0
    started = time.monotonic()
    try:
        archive = build()
    except (ArchiveNotBuilt, OSError) as error:
        print(f"class archive: not built, Spark starts as before; {error}")
        return 1
    size_mb = archive.stat().st_size / 2**20
    print(
        f"class archive: {archive} ({size_mb:.0f} MB, built in "
        f"{time.monotonic() - started:.0f} s); Spark drivers started from "
        "this project map it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
