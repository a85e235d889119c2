"""Reading a labelled folder in NAB's layout: windows as rows, and rows that
cannot be read named by file and line."""

import json
import pathlib

import pytest

from testing.labelled_series import load_folder


def write_folder(folder: pathlib.Path, rows: list[str], windows: list) -> None:
    (folder / "cat").mkdir(parents=True)
    (folder / "cat/a.csv").write_text("\n".join(["timestamp,value", *rows]) + "\n")
    (folder / "windows.json").write_text(json.dumps({"cat/a.csv": windows}))


def test_windows_become_the_row_ranges_they_cover(tmp_path):
    rows = [f"2024-01-01 00:{m:02d}:00,{m}" for m in range(0, 60, 5)]
    # 00:12 is between rows: the window starts at the first row after it
    # (00:15, row 3) and ends at the last row at or before 00:31 (row 6).
    write_folder(tmp_path, rows, [["2024-01-01 00:12:00", "2024-01-01 00:31:00"]])
    (series,) = load_folder(tmp_path)
    assert series.name == "cat/a.csv" and series.category == "cat"
    assert series.windows == ((3, 6),)
    assert series.values[:3] == (0.0, 5.0, 10.0)


@pytest.mark.parametrize(
    "row, says",
    [
        ("2024-01-01 00:05:00,", "line 3: a row needs a timestamp and a number"),
        ("yesterday,3", "line 3: a row needs a timestamp and a number"),
        ("2024-01-01 00:05:00,nan", "line 3: nan is not a number"),
        ("2024-01-01 00:05:00,inf", "line 3: inf is not a number"),
    ],
)
def test_a_row_that_cannot_be_read_is_named_by_file_and_line(tmp_path, row, says):
    write_folder(tmp_path, ["2024-01-01 00:00:00,1", row], [])
    with pytest.raises(ValueError, match=f"cat/a.csv, {says}"):
        load_folder(tmp_path)


def test_a_window_that_holds_no_row_is_an_error(tmp_path):
    write_folder(
        tmp_path,
        ["2024-01-01 00:00:00,1", "2024-01-01 00:05:00,2"],
        [["2024-01-02 00:00:00", "2024-01-02 01:00:00"]],
    )
    with pytest.raises(ValueError, match="holds no row"):
        load_folder(tmp_path)
