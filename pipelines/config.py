"""Loading a pipeline's YAML configuration and applying overrides to it.

A config is a two-level mapping, section -> key -> value. Overrides come as
"section.key=value" strings; values are parsed as YAML scalars, so numbers
and booleans keep their types. Unknown sections or keys are errors: a typo in
a config must not silently fall back to a default.
"""

import argparse
import copy
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

CONFIG_DIR = pathlib.Path(__file__).resolve().parent.parent / "configs"

Config = dict[str, dict[str, Any]]


class ConfigError(ValueError):
    pass


def load(path: str | pathlib.Path, defaults: Mapping[str, Mapping[str, Any]]) -> Config:
    """The config at `path`, merged over `defaults` and checked against them."""
    return merge(defaults, read(path), origin=str(path))


def read(path: str | pathlib.Path) -> dict[str, Any]:
    """The mapping of sections in the YAML file at `path`, unchecked."""
    try:
        loaded = yaml.safe_load(pathlib.Path(path).read_text()) or {}
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config {path} is not valid YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"config {path} must be a mapping of sections")
    return loaded


def merge(
    defaults: Mapping[str, Mapping[str, Any]],
    updates: Mapping[str, Any],
    origin: str,
) -> Config:
    """`defaults` with `updates` applied; unknown names raise `ConfigError`."""
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
            merged[section][key] = value
    return merged


def apply_overrides(config: Config, overrides: Iterable[str]) -> Config:
    """`config` with each "section.key=value" override applied in order."""
    for override in overrides:
        name, sep, raw = override.partition("=")
        section, dot, key = name.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"override {override!r} must look like section.key=value")
        config = merge(config, {section: {key: yaml.safe_load(raw)}}, "--set")
    return config


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
    default_path: pathlib.Path, args: argparse.Namespace, flag_keys: Mapping[str, str]
) -> Config:
    """A pipeline's config, from lowest to highest precedence.

    The shipped defaults at `default_path`, the file given by `--config`,
    each `--set section.key=value`, then the named flags that were given
    (`flag_keys` maps a flag's attribute name to its config key).
    """
    config = load(args.config, read(default_path))
    flags = [
        f"{key}={getattr(args, flag)}"
        for flag, key in flag_keys.items()
        if getattr(args, flag, None) is not None
    ]
    return apply_overrides(config, [*args.set, *flags])
