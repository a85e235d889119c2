"""The pipeline commands refuse mistakes: one line on stderr, exit status 2.

Run as a user runs them, in subprocesses; every case here used to run (with
a default, an empty input or a changed value) or end in a traceback.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pipelines import config as config_loader
from pipelines import photon_flags, zeitgeist_flags
from pipelines.output_pipelines import RECORD, record_pipeline
from transforms.records.json_files import part_path

USAGE = 2


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(module, *args, cwd=None):
    # This checkout's code, from any working directory.
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=path)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def assert_usage_error(done, *expected):
    assert done.returncode == USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no usage block, no traceback, no logs
    assert "error:" in lines[0]
    for text in expected:
        assert text in lines[0]


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        (
            "pipelines.zeitgeist",
            ["--windw_seconds", "60"],
            ["unknown flag --windw_seconds", "did you mean --window_seconds?"],
        ),
        # An abbreviation is not taken for the flag it starts.
        ("pipelines.zeitgeist", ["--window", "60"], ["did you mean --window_seconds?"]),
        # A misspelled Beam flag is refused too, with Beam's flag suggested.
        (
            "pipelines.photon",
            ["--direct_num_worker", "2"],
            ["did you mean --direct_num_workers?"],
        ),
        # A flag the word begins is meant before one spelt alike, even a
        # runner's: --checkpoint was taken for --job_endpoint, then --report.
        (
            "pipelines.zeitgeist",
            ["--checkpoint", "/tmp/c"],
            ["did you mean --checkpoint_dir?"],
        ),
        ("pipelines.photon", ["stray"], ["unexpected argument 'stray'"]),
        # A Beam flag's own mistake: Beam's usage block of every flag before.
        ("pipelines.zeitgeist", ["--runner"], ["argument --runner: expected one"]),
        (
            "pipelines.photon",
            ["--direct_num_workers=two"],
            ["argument --direct_num_workers: invalid int value: 'two'"],
        ),
        # Beam refused it only when the job was built, with a traceback.
        (
            "pipelines.zeitgeist",
            ["--runner=SparkRuner"],
            ["unknown runner 'SparkRuner' (did you mean SparkRunner?)", "DirectRunner"],
        ),
        (
            "pipelines.zeitgeist",
            ["--set", "window.size_seconds=ten"],
            ["window.size_seconds must be an integer, got 'ten'"],
        ),
        (
            "pipelines.photon",
            ["--set", "join.shards=1.5"],
            ["join.shards must be an integer, got 1.5"],
        ),
        (
            "pipelines.photon",
            ["--set", "registry.gc_days=yes"],
            ["registry.gc_days must be an integer, got True"],
        ),
        # Passes the type check, fails the parameter's own rule.
        ("pipelines.photon", ["--set", "join.shards=0"], ["must be positive"]),
        (
            "pipelines.zeitgeist",
            ["--set", "detector.max_autocorrelation=1.0"],
            ["detector.max_autocorrelation must be in [0, 1), got 1.0"],
        ),
        (
            "pipelines.zeitgeist",
            ["--set", "detector.novel_margin=-0.05"],
            ["novel_margin must be >= 0"],
        ),
        ("pipelines.photon", ["--pipeline_id", "a#b"], ["without '#'"]),
        ("pipelines.photon", ["--gc_days", "three"], ["--gc_days", "invalid int"]),
        (
            "pipelines.zeitgeist",
            ["--after_read", "archive"],
            ["after_read 'archive' needs an archive directory (--archive_dir)"],
        ),
        (
            "pipelines.photon",
            ["--after_read", "archive", "--archive_dir", "/no/such/dir"],
            ["--archive_dir '/no/such/dir': no such directory"],
        ),
        (
            "pipelines.zeitgeist",
            ["--set", "live.archive_dir=/tmp"],
            ["an archive directory is for after_read 'archive', not 'keep'"],
        ),
    ],
)
def test_mistakes_are_one_line_and_exit_2(module, args, expected, tmp_path):
    done = run_cli(module, "--output", str(tmp_path / "out"), *args)
    assert_usage_error(done, *expected)
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        # argparse's float and YAML both read NaN and infinity; each ended
        # in a TypeError or OverflowError far from the flag, or (a poll
        # interval) inside Spark.
        ("pipelines.zeitgeist", ["--threshold", "nan"], "--threshold: detector."),
        ("pipelines.zeitgeist", ["--threshold", "inf"], "threshold must be"),
        ("pipelines.zeitgeist", ["--set", "model.alpha=.nan"], "--set: model.alpha"),
        ("pipelines.zeitgeist", ["--days", "inf"], "--days: generator.days"),
        ("pipelines.zeitgeist", ["--poll_seconds", "nan", "--follow"], "live.poll_"),
        ("pipelines.photon", ["--max_wait_seconds", "inf"], "join.max_wait_seconds"),
        ("pipelines.photon", ["--max_wait_seconds", "nan"], "--max_wait_seconds:"),
        (
            "pipelines.photon",
            ["--set", "bigtable.deadline_seconds=.inf"],
            "bigtable.deadline_seconds",
        ),
        # A number flag that sets no config key is checked by argparse.
        (
            "pipelines.photon",
            ["--fail_after_register_fraction", "inf"],
            "argument --fail_after_register_fraction",
        ),
    ],
)
def test_numbers_must_be_finite(module, args, expected, tmp_path):
    done = run_cli(module, "--output", str(tmp_path / "out"), *args)
    assert_usage_error(done, expected, "must be a finite number")
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    # PyYAML keeps the last of the two: an edited copy of a line silently won.
    config = tmp_path / "zeitgeist.yaml"
    config.write_text("window:\n  size_seconds: 60\n  size_seconds: 120\n")
    done = run_cli(
        "pipelines.zeitgeist", "--output", str(tmp_path / "z"), "--config", str(config)
    )
    assert_usage_error(
        done, f"config {config}: window.size_seconds is given twice (lines 2 and 3)"
    )
    config.write_text("window:\n  size_seconds: 60\nwindow:\n  late_policy: drop\n")
    with pytest.raises(config_loader.ConfigError, match="window is given twice"):
        config_loader.read(config)


@pytest.mark.parametrize("text", ["1e1", "1.0e1", "1e+1", "10e0", ".1e2"])
def test_exponent_notation_is_a_number(text, tmp_path):
    # YAML 1.1 (PyYAML) reads 1e1 as a string: "must be a number, got '1e1'".
    args, _ = zeitgeist_flags.parse_args(
        ["--output", "/tmp/x", "--set", f"detector.threshold={text}"]
    )
    assert zeitgeist_flags.load_config(args)["detector"]["threshold"] == 10.0
    config = tmp_path / "zeitgeist.yaml"
    config.write_text(f"detector:\n  threshold: {text}\n")
    args, _ = zeitgeist_flags.parse_args(
        ["--output", "/tmp/x", "--config", str(config)]
    )
    assert zeitgeist_flags.load_config(args)["detector"]["threshold"] == 10.0


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        ("pipelines.zeitgeist", ["--outptu", "x"], "did you mean --output?"),
        ("pipelines.photon_verify", ["--output", "x", "--joinedd", "j"], "--joined?"),
    ],
)
def test_a_mistyped_required_flag_is_named_not_reported_missing(module, args, expected):
    # argparse would report the required flag as missing, not the typo.
    done = run_cli(module, *args)
    assert_usage_error(done, f"unknown flag {args[-2]}", expected)


def test_a_missing_required_flag_is_still_reported():
    assert_usage_error(
        run_cli("pipelines.photon_verify", "--output", "x"),
        "the following arguments are required: --joined",
    )


def test_input_globs_that_match_nothing_are_errors(tmp_path):
    (tmp_path / "q.jsonl").write_text("")
    empty = str(tmp_path / "missing" / "*.jsonl")
    done = run_cli(
        "pipelines.zeitgeist", "--output", str(tmp_path / "z"), "--input", empty
    )
    assert_usage_error(done, f"--input '{empty}' matches no file")
    done = run_cli(
        "pipelines.photon",
        *("--output", str(tmp_path / "p")),
        *("--queries", str(tmp_path / "q.jsonl"), "--clicks", empty),
    )
    assert_usage_error(done, f"--clicks '{empty}' matches no file")
    text = tmp_path / "c.txt"
    text.write_text("")
    done = run_cli(
        "pipelines.photon",
        *("--output", str(tmp_path / "p")),
        *("--queries", str(text), "--clicks", str(text)),
    )
    assert_usage_error(done, f"--queries '{text}' does not name its format")
    assert "--input_format" in done.stderr
    # The same for Zeitgeist, and with --input_format the name need not tell.
    done = run_cli(
        "pipelines.zeitgeist", *("--output", str(tmp_path / "z"), "--input", str(text))
    )
    assert_usage_error(done, f"--input '{text}' does not name its format")
    done = run_cli(
        "pipelines.zeitgeist",
        *("--output", str(tmp_path / "z"), "--input", str(text)),
        "--input_format=jsonl",
    )
    assert done.returncode == 0, done.stderr


def test_an_input_that_names_a_directory_is_refused_with_a_pattern_inside(tmp_path):
    # Read, a directory was one dead letter and exit 0; followed, it was
    # watched forever, reading nothing.
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "q.jsonl").write_text("")
    hint = f"is a directory: give a pattern of the files in it, e.g. '{inbox}/*.jsonl'"
    output = ("--output", str(tmp_path / "out"))
    for follow in ([], ["--follow", "--runner=SparkRunner"]):
        done = run_cli("pipelines.zeitgeist", *output, "--input", str(inbox), *follow)
        assert_usage_error(done, f"--input '{inbox}' {hint}")
    done = run_cli(
        "pipelines.photon",
        *output,
        *("--queries", str(inbox / "q.jsonl"), "--clicks", f"{inbox}/"),
    )
    assert_usage_error(done, f"--clicks '{inbox}/' {hint}")
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


def test_a_bare_glob_reads_the_current_directorys_files(tmp_path):
    # Beam's match found nothing for '*.jsonl' (an empty directory part):
    # the command said it matched no file, where './*.jsonl' worked.
    search = {"query": "a", "event_time": 1_767_571_200_000}
    (tmp_path / "a.jsonl").write_text(json.dumps(search) + "\n")
    out = str(tmp_path / "out")
    done = run_cli(
        "pipelines.zeitgeist", "--input", "*.jsonl", "--output", out, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^records read +1$", done.stdout, re.MULTILINE), done.stdout


def test_follow_mistakes_are_one_line_and_exit_2(tmp_path):
    output = str(tmp_path / "z")
    done = run_cli("pipelines.zeitgeist", "--output", output, "--follow")
    assert_usage_error(done, "--follow needs --input")
    # A followed pattern may match nothing yet, but its directory must exist.
    missing = str(tmp_path / "missing" / "*.jsonl")
    done = run_cli(
        "pipelines.zeitgeist", "--output", output, "--follow", "--input", missing
    )
    assert_usage_error(done, f"no directory '{tmp_path / 'missing'}'")
    # Two followed patterns are two sources, and the watermark of one that
    # has read no file yet held every window open, a dip included.
    two = ("--input", str(tmp_path / "*.jsonl"), "--input", str(tmp_path / "*.csv"))
    done = run_cli("pipelines.zeitgeist", "--output", output, "--follow", *two)
    assert_usage_error(done, "--input is given 2 times: a followed --input is one")
    # Beam's DirectRunner cannot run a followed directory live.
    inbox = str(tmp_path / "*.jsonl")
    done = run_cli(
        "pipelines.zeitgeist", "--output", output, "--follow", "--input", inbox
    )
    assert_usage_error(done, "--follow needs a runner", "--runner=SparkRunner")
    assert not (tmp_path / "z").exists(), "nothing may run before the check"


@pytest.mark.parametrize("module", ["pipelines.zeitgeist", "pipelines.photon"])
def test_a_fresh_live_run_over_an_earlier_runs_outputs_is_refused(tmp_path, module):
    # It deleted them as it started: with --after_read delete, their input
    # was gone too, and the earlier run's results with it.
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    output = tmp_path / "out"
    output.mkdir()
    earlier = output / ("anomalies" if module.endswith("zeitgeist") else "joined")
    earlier = pathlib.Path(part_path(str(earlier), 0, 3))
    earlier.write_text("{}\n")
    inputs = (
        ["--input", str(inbox / "*.jsonl")]
        if module.endswith("zeitgeist")
        else ["--queries", str(inbox / "q*.jsonl"), "--clicks", str(inbox / "c*.jsonl")]
    )
    done = run_cli(
        module,
        *("--output", str(output), "--follow", "--runner=SparkRunner"),
        *("--after_read", "delete", *inputs),
    )
    assert_usage_error(
        done,
        f"{output} holds the outputs of an earlier run ({earlier.name})",
        "--checkpoint_dir",
    )
    assert earlier.read_text() == "{}\n"


@pytest.mark.parametrize("module", ["pipelines.zeitgeist", "pipelines.photon"])
def test_the_live_generator_on_beams_direct_runner_is_refused_by_its_flag(
    tmp_path, module
):
    # The refusal named --follow, which the command was not given.
    done = run_cli(module, "--output", str(tmp_path / "out"), "--streaming")
    assert_usage_error(
        done, "--streaming with no input needs a runner", "--runner=SparkRunner"
    )
    assert "--follow" not in done.stderr
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


def test_streaming_over_files_on_beams_direct_runner_is_refused(tmp_path):
    # A RuntimeError from Beam ("GroupByKey ... was not replaced as
    # expected"), or for Photon a NotImplementedError once it had started.
    log = tmp_path / "log.jsonl"
    log.write_text("")
    output = ("--output", str(tmp_path / "out"))
    for module, inputs in [
        ("pipelines.zeitgeist", ["--input", str(log)]),
        ("pipelines.photon", ["--queries", str(log), "--clicks", str(log)]),
    ]:
        for runner in ([], ["--runner=BundleBasedDirectRunner"]):
            done = run_cli(module, *output, *inputs, "--streaming", *runner)
            assert_usage_error(
                done, "--streaming needs a runner", "--runner=SparkRunner"
            )
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


def test_photon_follow_mistakes_are_one_line_and_exit_2(tmp_path):
    output = str(tmp_path / "p")
    done = run_cli("pipelines.photon", "--output", output, "--follow")
    assert_usage_error(done, "--follow needs --queries and --clicks")
    inbox = str(tmp_path / "*.jsonl")
    missing = str(tmp_path / "missing" / "*.jsonl")
    follow = ("pipelines.photon", "--output", output, "--follow")
    done = run_cli(*follow, "--queries", inbox, "--clicks", missing)
    assert_usage_error(done, "--clicks", f"no directory '{tmp_path / 'missing'}'")
    done = run_cli(*follow, "--queries", inbox, "--clicks", inbox)
    assert_usage_error(done, "--follow needs a runner", "--runner=SparkRunner")
    assert not (tmp_path / "p").exists(), "nothing may run before the check"


@pytest.mark.parametrize(
    "module", ["pipelines.zeitgeist", "pipelines.photon", "pipelines.photon_verify"]
)
def test_an_output_that_cannot_be_a_directory_is_refused(module, tmp_path):
    log = tmp_path / "c.jsonl"
    log.write_text("")
    joined = tmp_path / "joined"
    joined.mkdir()
    record_pipeline(joined, "east")  # a Photon output, for the verifier
    # The verifier would refuse a fake project's Bigtable, after the check.
    args = {
        "pipelines.zeitgeist": [],
        "pipelines.photon": [],
        "pipelines.photon_verify": [
            *("--queries", str(log), "--clicks", str(log), "--joined", str(joined)),
            *("--bigtable_project", "no-such-project", "--bigtable_instance", "i"),
        ],
    }[module]
    file = tmp_path / "file"
    file.write_text("")
    for output, expected in [
        # An unset shell variable: the sinks would replace the outputs of
        # an earlier run in the current directory.
        ("", "--output is empty"),
        (str(file), f"--output '{file}' is a file, not a directory"),
        (str(file / "out"), f"--output '{file / 'out'}': '{file}' is a file"),
        ("/proc/no-such-dir", "--output '/proc/no-such-dir' cannot be created"),
    ]:
        done = run_cli(module, *args, "--output", output, cwd=joined)
        assert_usage_error(done, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "file", "joined"]
    assert [p.name for p in joined.iterdir()] == [RECORD]


def test_an_output_directory_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    from pipelines import cli

    def refused(**kwargs):
        raise PermissionError(13, "Permission denied")

    # Root writes anywhere: the probe is made to fail as it would for others.
    monkeypatch.setattr(cli.tempfile, "TemporaryFile", refused)
    with pytest.raises(cli.UsageError, match="cannot be written: Permission denied"):
        cli.output_directory("--output", str(tmp_path))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # No scheme: the JVM's gateway exited ('JAVA_GATEWAY_EXITED').
        (["--spark_master_url=127.0.0.1:7077"], "did you mean spark://127.0.0.1:7077?"),
        # A Java trace once Spark parsed it.
        (["--spark_master_url=local[two]"], "'local[two]' is not a Spark master"),
        (["--spark_conf", "spark.executor.memory"], "--spark_conf expects key=value"),
        # Taken by Spark, and then every grouped element was dropped.
        (
            ["--spark_conf", "spark.default.parallelism=0"],
            "spark.default.parallelism must be a whole number >= 1, got '0'",
        ),
        (["--spark_bundle_bytes=0"], "--spark_bundle_bytes must be >= 1"),
        (["--checkpoint_dir", "/dev/null"], "'/dev/null' is a file, not a directory"),
    ],
)
def test_spark_runner_options_are_checked_before_spark_starts(args, expected, tmp_path):
    for module in ("pipelines.zeitgeist", "pipelines.photon"):
        done = run_cli(
            module, "--output", str(tmp_path / "out"), "--runner=SparkRunner", *args
        )
        assert_usage_error(done, expected)
    assert not (tmp_path / "out").exists(), "nothing may run before the check"


def test_verify_refuses_a_joined_directory_that_does_not_exist(tmp_path):
    log = tmp_path / "c.jsonl"
    log.write_text("")
    done = run_cli(
        "pipelines.photon_verify",
        *("--queries", str(log), "--clicks", str(log)),
        *("--joined", str(tmp_path / "typo"), "--output", str(tmp_path / "v")),
    )
    assert_usage_error(done, "--joined", "is not a directory")


@pytest.mark.parametrize("pipeline_id", ["no", "off", "010", "8", "1e3", "null"])
def test_string_options_stay_the_strings_given(pipeline_id):
    args, _ = photon_flags.parse_args(
        ["--output", "/tmp/x", "--pipeline_id", pipeline_id]
    )
    assert photon_flags.load_config(args)["pipeline"]["id"] == pipeline_id
    args, _ = photon_flags.parse_args(
        ["--output", "/tmp/x", "--set", f"pipeline.id={pipeline_id}"]
    )
    assert photon_flags.load_config(args)["pipeline"]["id"] == pipeline_id


def test_config_file_values_are_type_checked(tmp_path):
    config = tmp_path / "photon.yaml"
    config.write_text("pipeline:\n  id: no\n")  # YAML 1.1 reads `no` as false
    args, _ = photon_flags.parse_args(["--output", "/tmp/x", "--config", str(config)])
    with pytest.raises(config_loader.ConfigError, match="pipeline.id must be a string"):
        photon_flags.load_config(args)


def test_numbers_accept_integers_and_reject_booleans():
    defaults = {"join": {"max_wait_seconds": 600.0, "shards": 512}}
    merged = config_loader.apply_overrides(defaults, ["join.max_wait_seconds=30"])
    assert merged["join"]["max_wait_seconds"] == 30
    with pytest.raises(config_loader.ConfigError, match="join.shards may not be null"):
        config_loader.apply_overrides(defaults, ["join.shards=null"])
    with pytest.raises(config_loader.ConfigError, match="must be a number"):
        config_loader.apply_overrides(defaults, ["join.max_wait_seconds=off"])


def test_beam_flags_are_still_passed_on():
    from pipelines import cli

    args, beam_args = photon_flags.parse_args(
        ["--output", "/tmp/x", "--direct_num_workers", "2", "--runner=DirectRunner"]
    )
    assert args.output == "/tmp/x"
    assert beam_args == ["--direct_num_workers", "2", "--runner=DirectRunner"]
    with pytest.raises(cli.UsageError, match="did you mean --direct_num_workers"):
        photon_flags.parse_args(["--output", "/tmp/x", "--direct_num_worker=2"])


@pytest.mark.parametrize("module", ["pipelines.zeitgeist", "pipelines.photon"])
def test_help_names_the_runner_options_it_takes_beside_its_own(module):
    done = run_cli(module, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for flag in ("--runner=SparkRunner", "--spark_master_url", "--checkpoint_dir"):
        assert flag in text


def test_patterns_that_match_one_file_are_refused(tmp_path):
    # Each pattern is read on its own: before, the file was read twice and
    # its searches counted twice, without a word.
    log = tmp_path / "searches.jsonl"
    log.write_text('{"query": "q", "event_time": 1767571200000}\n')
    other = tmp_path / "other.jsonl"
    other.write_text('{"query": "q", "event_time": 1767571200000}\n')
    out = str(tmp_path / "out")
    overlapping = run_cli(
        "pipelines.zeitgeist",
        *("--input", str(log), "--input", str(tmp_path / "*.jsonl"), "--output", out),
    )
    assert_usage_error(
        overlapping,
        f"--input {str(log)!r} and {str(tmp_path / '*.jsonl')!r} both match",
        "read twice",
    )
    twice = run_cli(
        "pipelines.zeitgeist",
        *("--input", str(log), "--input", str(log), "--output", out),
    )
    assert_usage_error(twice, f"--input {str(log)!r} is given twice")
    apart = run_cli(
        "pipelines.zeitgeist",
        *("--input", str(log), "--input", str(other), "--output", out),
    )
    assert apart.returncode == 0, apart.stderr
    assert int(apart.stdout.split("records read")[1].split()[0]) == 2


def test_a_window_too_large_for_beam_timestamps_is_refused(tmp_path):
    # Before, the job ran and failed in the window counter with a traceback
    # ("OverflowError: Python int too large to convert to C long").
    log = tmp_path / "searches.jsonl"
    log.write_text('{"query": "q", "event_time": 1767571200000}\n')
    done = run_cli(
        "pipelines.zeitgeist",
        *("--input", str(log), "--output", str(tmp_path / "out")),
        *("--window_seconds", "10000000000000"),
    )
    assert_usage_error(done, "window size must be at most", "Beam's global window")


def test_paths_that_lead_to_one_file_are_refused(tmp_path):
    # Before, the patterns were compared as strings: each of these read the
    # one-line file twice ("records read 2").
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"query": "q", "event_time": 1767571200000}\n')
    (folder / "link.jsonl").symlink_to("a.jsonl")
    out = ("--output", str(tmp_path / "out"))
    for other in (f"{folder}/./a.jsonl", f"{folder}//a.jsonl"):
        done = run_cli(
            "pipelines.zeitgeist",
            "--input",
            f"{folder}/a.jsonl",
            "--input",
            other,
            *out,
        )
        assert_usage_error(done, f"both match {other!r}", "read twice")
    glob = run_cli("pipelines.zeitgeist", "--input", f"{folder}/*.jsonl", *out)
    assert_usage_error(
        glob,
        f"--input '{folder}/*.jsonl' matches '{folder}/a.jsonl' and "
        f"'{folder}/link.jsonl', one file",
    )


def test_generator_flags_are_refused_where_no_generator_reads_them(tmp_path):
    # Before, they were ignored: a run over files, or a batch run, went on
    # as if they had not been given.
    log = tmp_path / "searches.jsonl"
    log.write_text('{"query": "q", "event_time": 1767571200000}\n')
    out = ("--output", str(tmp_path / "out"))
    cases = [
        (
            "pipelines.zeitgeist",
            ["--input", str(log), "--num_queries", "5"],
            "--num_queries sets the generated stream, which --input replaces",
        ),
        (
            "pipelines.zeitgeist",
            ["--rate", "10"],
            "--rate paces the live generator: add --streaming",
        ),
        (
            "pipelines.zeitgeist",
            ["--live_minutes", "5"],
            "--live_minutes paces the live generator: add --streaming",
        ),
        (
            "pipelines.zeitgeist",
            ["--input", str(log), "--live_minutes", "5"],
            "--live_minutes sets the generated stream, which --input replaces",
        ),
        (
            "pipelines.photon",
            ["--live_minutes", "1"],
            "--live_minutes paces the live generator: add --streaming",
        ),
    ]
    for module, args, expected in cases:
        assert_usage_error(run_cli(module, *args, *out), expected)


def test_a_joined_directory_must_hold_a_photon_output(tmp_path):
    from pipelines.cli import UsageError
    from pipelines.photon_verify import check_joined_directory

    with pytest.raises(UsageError, match="holds no Photon output"):
        check_joined_directory(str(tmp_path))
    (tmp_path / "run-0001").mkdir()  # what a verifier writes into
    check_joined_directory(str(tmp_path))
