"""The Bloom filter: no false negatives, a bounded false-positive rate, bytes."""

import os
import subprocess
import sys

import pytest

from transforms.millwheel.bloom import BloomFilter


def test_added_items_are_always_reported():
    bloom = BloomFilter.for_capacity(1000, 0.01)
    items = [f"click-{i}".encode() for i in range(1000)]
    for item in items:
        bloom.add(item)
    assert all(item in bloom for item in items)


def test_empty_filter_contains_nothing():
    bloom = BloomFilter(64, 3)
    assert b"anything" not in bloom
    assert bloom.to_bytes() == bytes(8)


def test_false_positive_rate_stays_near_target():
    bloom = BloomFilter.for_capacity(1000, 0.01)
    for i in range(1000):
        bloom.add(f"in-{i}".encode())
    false_positives = sum(f"out-{i}".encode() in bloom for i in range(10_000))
    # Target 1%: 100 expected out of 10,000; allow generous noise.
    assert false_positives < 250


def test_sizing_follows_the_textbook_formula():
    bloom = BloomFilter.for_capacity(1000, 0.01)
    # m = -1000 ln 0.01 / (ln 2)^2 = 9585.06..., k = 9586 / 1000 * ln 2 = 6.64...
    assert bloom.num_bits == 9586
    assert bloom.num_hashes == 7


def test_round_trips_through_bytes():
    bloom = BloomFilter(100, 4)
    bloom.add(b"a")
    bloom.add(b"b")
    data = bloom.to_bytes()
    assert len(data) == 13

    restored = BloomFilter(100, 4, data)
    assert b"a" in restored
    assert b"b" in restored
    assert restored.to_bytes() == data


def test_answers_do_not_depend_on_the_process():
    # Filters live in state and move between workers: the bit layout must not
    # depend on Python's per-process hash salt.
    script = (
        "from transforms.millwheel.bloom import BloomFilter\n"
        "b = BloomFilter(256, 3)\n"
        "b.add(b'click-42')\n"
        "print(b.to_bytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    here = BloomFilter(256, 3)
    here.add(b"click-42")
    assert outputs == {here.to_bytes().hex()}


def test_a_tiny_filter_gives_false_positives():
    bloom = BloomFilter(1, 1)
    bloom.add(b"a")
    assert b"never-added" in bloom


@pytest.mark.parametrize(
    ("args", "message"),
    [((0, 1), "positive"), ((8, 0), "positive"), ((16, 1, b"\x00"), "2 bytes")],
)
def test_bad_layouts_are_rejected(args, message):
    with pytest.raises(ValueError, match=message):
        BloomFilter(*args)


def test_bad_sizing_is_rejected():
    with pytest.raises(ValueError, match="capacity"):
        BloomFilter.for_capacity(0, 0.1)
    with pytest.raises(ValueError, match="false_positive_rate"):
        BloomFilter.for_capacity(10, 1.0)
