"""Parameter dataclasses checked against their own field types.

The transforms take their parameters as frozen dataclasses. A job that
builds them in code skips the config file's type checks
(`pipelines.config`), so a float where an int belongs, or NaN where a
threshold belongs, would otherwise fail deep in a worker or, worse, quietly
switch a rule off (every comparison with NaN is false).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any


def check_field_types(params: Any, section: str | None = None) -> None:
    """Raises `TypeError` for a field of the dataclass `params` that is not
    of its declared kind: True or False for a bool, an integer (not a bool)
    for an int, a finite number for a float, a string for a str, an
    instance for a dataclass; `X | None` admits None besides. Fields of
    other types are left to the class's own checks. Errors name the field
    as `section.field` (by default, the class's name)."""
    hints = _field_types(type(params))
    section = section or type(params).__name__
    for field in dataclasses.fields(params):
        kind = hints.get(field.name)
        value = getattr(params, field.name)
        arms = typing.get_args(kind) if _is_union(kind) else (kind,)
        if value is None and type(None) in arms:
            continue
        kinds = [arm for arm in arms if arm is not type(None)]
        if len(kinds) != 1:
            continue
        wrong = _wrong_for(kinds[0])
        if wrong is not None and wrong[0](value):
            raise TypeError(f"{section}.{field.name} must be {wrong[1]}, got {value!r}")


def _is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def _wrong_for(kind: Any) -> tuple[Callable[[Any], bool], str] | None:
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return (lambda v: not isinstance(v, kind), f"a {kind.__name__}")
    return _WRONG.get(kind)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Declared type -> (is the value wrong for it, what it must be).
_WRONG = {
    bool: (lambda v: not isinstance(v, bool), "True or False"),
    int: (lambda v: isinstance(v, bool) or not isinstance(v, int), "an integer"),
    float: (lambda v: not _is_number(v) or not math.isfinite(v), "a finite number"),
    str: (lambda v: not isinstance(v, str), "a string"),
}


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    # Resolves annotations written as strings (`from __future__ import
    # annotations`) once per class.
    return typing.get_type_hints(cls)


def require_kinds(owner: str, *expected: tuple[str, Any, type]) -> None:
    """Raises `TypeError` for an argument of `owner` (a transform's name)
    that is not an instance of its class, given as (name, value, class)
    triples: parameter objects passed in the wrong place or of the wrong
    kind fail at construction, not as an attribute error in a worker."""
    for name, value, kind in expected:
        if not isinstance(value, kind):
            raise TypeError(
                f"{owner}'s {name} must be a {kind.__name__}, got {value!r}"
            )
