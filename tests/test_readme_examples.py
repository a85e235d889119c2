"""The README's examples of Zeitgeist in one's own Beam job run as written.

Each is taken from README.md itself and run in a fresh interpreter, so an
example that drifts from the code fails here rather than for a reader.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Use the transforms in your own Beam job"
T0 = 1_767_571_200_000


def section_blocks() -> list[str]:
    """The ```python blocks of the README's section on one's own job."""
    text = README.read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end], re.DOTALL)


def run_python(code: str, cwd: pathlib.Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def printed_counts(stdout: str) -> list[int]:
    """The `count` of each `WindowCount` the example printed (text format)."""
    return [int(n) for n in re.findall(r"^count: (\d+)$", stdout, re.MULTILINE)]


def test_the_section_has_the_two_examples():
    blocks = section_blocks()
    assert len(blocks) == 2
    assert "Zeitgeist(WindowParams(size_ms=60_000))" in blocks[0]
    assert "ReadSearchBatches" in blocks[1]


def test_zeitgeist_from_create_counts_each_minute(tmp_path):
    # 100 searches a second apart from a minute boundary: 60 in the first
    # minute, 40 in the second.
    stdout = run_python(section_blocks()[0], tmp_path)
    assert sorted(printed_counts(stdout)) == [40, 60]


@pytest.mark.slow
def test_zeitgeist_on_arrow_tables_gives_the_same_counts(tmp_path):
    # The second example reads logs/*.parquet and builds on the first's
    # imports; it prints nothing, so its counts are printed here.
    first, second = section_blocks()
    logs = tmp_path / "logs"
    logs.mkdir()
    table = pa.table(
        {
            "query": ["beam"] * 100,
            "event_time": [T0 + i * 1000 for i in range(100)],
        }
    )
    pq.write_table(table, logs / "a.parquet")
    imports = "\n".join(
        line for line in first.splitlines() if line.startswith(("import", "from"))
    )
    show = (
        '\n    outputs["window_counts"] | beam.Map('
        "lambda w: print(json.dumps(w.count)))\n"
    )
    code = f"import json\n{imports}\n{second.rstrip()}{show}"
    stdout = run_python(code, tmp_path)
    assert sorted(json.loads(line) for line in stdout.split()) == [40, 60]
