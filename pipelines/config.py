"""Loading a pipeline's YAML configuration and applying overrides to it.

A config is a two-level mapping, section -> key -> value. Overrides come as
"section.key=value" strings; values are parsed as YAML scalars, so numbers
and booleans keep their types, except for keys whose value is a string: their
text is taken as it is, so `--set pipeline.id=no` is "no", not false, and
`010` is "010", not 8. Unknown sections or keys are errors: a typo in a
config must not silently fall back to a default.

Every value is checked against the type of its shipped default (an integer
is also a valid float), or against the type the caller declares for keys
whose default does not tell (a null default, a string unless declared; a
whole-number default of a value that may be fractional), and a number must
be finite, so a wrong type is a one-line `ConfigError` instead of a failure
deep inside the job.

YAML is read as PyYAML's safe loader reads it, with two exceptions
(`_Loader`): a mapping that gives a key twice is an error, and a number in
exponent notation is a number as in YAML 1.2 and JSON (`1e1`, `2.5e3`), not
the string YAML 1.1 makes of it without both a dot and a signed exponent.
"""

import argparse
import copy
import math
import pathlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"

Config = dict[str, dict[str, Any]]
# "section.key" -> the type its values must have, and whether null is allowed.
Types = dict[str, tuple[type, bool]]

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


class ConfigError(ValueError):
    pass


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in a mapping raises
    `ConfigError` (PyYAML keeps the last one, so an edited copy of a line
    silently overrode the first) and YAML 1.2's exponent notation reads as
    a number."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        # Each nested mapping node's dotted path, to name a duplicate by it.
        self._paths: dict[int, str] = {}

    def construct_mapping(self, node, deep=False):
        path = self._paths.get(id(node), "")
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue  # `<<` merges on purpose; a complex key is PyYAML's concern
            name = f"{path}.{key_node.value}" if path else key_node.value
            line = key_node.start_mark.line + 1
            if key_node.value in lines:
                raise ConfigError(
                    f"{name} is given twice (lines {lines[key_node.value]} and "
                    f"{line}): keep one"
                )
            lines[key_node.value] = line
            self._paths[id(value_node)] = name
        return super().construct_mapping(node, deep)


# What YAML 1.1's float syntax leaves a string: no dot, or an unsigned
# exponent (`1e1`, `1.0e1`, `.5e3`); Python's float() reads them all.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)


def load(path: str | pathlib.Path, defaults: Mapping[str, Mapping[str, Any]]) -> Config:
    """The config at `path`, merged over `defaults` and checked against them."""
    return merge(defaults, read(path), origin=str(path))


def value_types(
    defaults: Mapping[str, Mapping[str, Any]],
    declared: Mapping[str, type] | None = None,
) -> Types:
    """The type of each key's values: as `declared` ("section.key" -> type),
    else its default's, else (a null default) a string. A key whose default
    is null may stay null."""
    declared = declared or {}
    types: Types = {}
    for section, values in defaults.items():
        for key, value in values.items():
            name = f"{section}.{key}"
            kind = declared.get(name, str if value is None else type(value))
            types[name] = (kind, value is None)
    return types


def _check_type(
    name: str, value: Any, expected: tuple[type, bool], origin: str
) -> None:
    kind, may_be_null = expected
    if value is None:
        if not may_be_null:
            raise ConfigError(f"{origin}: {name} may not be null")
        return
    if not _is_a(value, kind):
        raise ConfigError(
            f"{origin}: {name} must be {_TYPE_NAMES.get(kind, kind.__name__)}"
            f", got {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        # YAML's .nan/.inf and argparse's "nan"/"inf" are floats; no
        # setting means anything by them, and the job would fail far off.
        raise ConfigError(f"{origin}: {name} must be a finite number, got {value!r}")


def _is_a(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool  # YAML's yes/no must not pass for 1/0
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def read(path: str | pathlib.Path) -> dict[str, Any]:
    """The mapping of sections in the YAML file at `path`, unchecked."""
    try:
        loaded = _load_yaml(pathlib.Path(path).read_text()) or {}
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config {path} is not valid YAML: {error}") from None
    except ConfigError as error:
        raise ConfigError(f"config {path}: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"config {path} must be a mapping of sections")
    return loaded


def merge(
    defaults: Mapping[str, Mapping[str, Any]],
    updates: Mapping[str, Any],
    origin: str,
    types: Types | None = None,
) -> Config:
    """`defaults` with `updates` applied; unknown names and values of the wrong
    type (`types`, by default those of `defaults`) raise `ConfigError`."""
    types = value_types(defaults) if types is None else types
    merged: Config = copy.deepcopy({k: dict(v) for k, v in defaults.items()})
    for section, values in updates.items():
        if section not in merged:
            raise ConfigError(
                f"{origin}: unknown section {section!r}; "
                f"expected one of: {', '.join(merged)}"
            )
        if not isinstance(values, dict):
            raise ConfigError(f"{origin}: section {section!r} must be a mapping")
        for key, value in values.items():
            if key not in merged[section]:
                raise ConfigError(
                    f"{origin}: unknown key {section}.{key}; "
                    f"expected one of: {', '.join(merged[section])}"
                )
            _check_type(f"{section}.{key}", value, types[f"{section}.{key}"], origin)
            merged[section][key] = value
    return merged


def apply_overrides(
    config: Config, overrides: Iterable[str], types: Types | None = None
) -> Config:
    """`config` with each "section.key=value" override applied in order.

    A string key takes the text as it is; other values are YAML scalars.
    `types` defaults to the types of `config`'s values.
    """
    types = value_types(config) if types is None else types
    for override in overrides:
        name, sep, raw = override.partition("=")
        section, dot, key = name.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"override {override!r} must look like section.key=value")
        kind, _ = types.get(f"{section}.{key}", (None, False))
        value = raw if kind is str else _scalar(raw, name)
        config = merge(config, {section: {key: value}}, "--set", types)
    return config


def _scalar(raw: str, name: str) -> Any:
    try:
        return _load_yaml(raw)
    except (yaml.YAMLError, ConfigError):
        raise ConfigError(f"--set {name}: {raw!r} is not a value") from None


def add_config_arguments(
    parser: argparse.ArgumentParser, default_path: pathlib.Path
) -> None:
    """The `--config` and `--set` flags every pipeline takes."""
    parser.add_argument("--config", default=str(default_path), help="YAML config")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value; repeatable",
    )


def from_command_line(
    default_path: pathlib.Path,
    args: argparse.Namespace,
    flag_keys: Mapping[str, str],
    declared: Mapping[str, type] | None = None,
) -> Config:
    """A pipeline's config, from lowest to highest precedence.

    The shipped defaults at `default_path`, the file given by `--config`,
    each `--set section.key=value`, then the named flags that were given
    (`flag_keys` maps a flag's attribute name to its config key). Flag values
    keep the type argparse gave them: they are never re-read as YAML.
    `declared` names the type of keys whose default does not tell (see
    `value_types`).
    """
    defaults = read(default_path)
    types = value_types(defaults, declared)
    config = merge(defaults, read(args.config), str(args.config), types)
    config = apply_overrides(config, args.set, types)
    for flag, name in flag_keys.items():
        value = getattr(args, flag, None)
        if value is not None:
            section, key = name.split(".")
            config = merge(config, {section: {key: value}}, f"--{flag}", types)
    return config
