"""Parameter dataclasses checked against their declared field types."""

from __future__ import annotations

import dataclasses
import math

import pytest

from transforms.millwheel.typed_params import check_field_types
from transforms.photon.params import BigtableTarget, JoinParams, RegistryParams


@dataclasses.dataclass(frozen=True)
class Knobs:
    # Annotations are strings here (`from __future__ import annotations`).
    flag: bool = True
    windows: int = 3
    sigma: float = 1.0
    name: str = "x"
    maybe: int | None = None

    def __post_init__(self) -> None:
        check_field_types(self, "knobs")


@pytest.mark.parametrize(
    "field, value, must_be",
    [
        ("flag", 1, "True or False"),
        ("windows", 3.0, "an integer"),
        ("windows", True, "an integer"),
        ("sigma", math.nan, "a finite number"),
        ("sigma", -math.inf, "a finite number"),
        ("sigma", "1.0", "a finite number"),
        ("name", b"x", "a string"),
    ],
)
def test_a_field_of_the_wrong_kind_is_named(field, value, must_be):
    with pytest.raises(TypeError, match=f"^knobs.{field} must be {must_be}, got "):
        Knobs(**{field: value})


def test_right_kinds_pass_and_an_optional_field_takes_none_or_its_kind():
    knobs = Knobs(flag=False, windows=0, sigma=2, name="", maybe=None)
    assert knobs.sigma == 2  # an int is a number
    assert Knobs(maybe=7).maybe == 7
    with pytest.raises(TypeError, match="knobs.maybe must be an integer"):
        Knobs(maybe="7")


def test_a_dataclass_field_takes_an_instance_of_its_class():
    @dataclasses.dataclass(frozen=True)
    class Outer:
        inner: Knobs = Knobs()

        def __post_init__(self) -> None:
            check_field_types(self)

    assert Outer().inner == Knobs()
    with pytest.raises(TypeError, match="Outer.inner must be a Knobs, got"):
        Outer(inner=(True, 3))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: JoinParams(max_wait_ms=math.nan), "JoinParams.max_wait_ms"),
        (lambda: JoinParams(shards=2.0), "JoinParams.shards must be an integer"),
        (lambda: BigtableTarget("p", "i", deadline_s=math.inf), "deadline_s"),
        (lambda: RegistryParams(gc_days="3"), "RegistryParams.gc_days"),
    ],
)
def test_photon_parameters_are_checked_when_made(make, message):
    with pytest.raises(TypeError, match=message):
        make()
