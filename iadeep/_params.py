"""The one validator of typed configurations from untyped parameters (CLI options, a DAG conf).

A configuration is a frozen dataclass whose ``__post_init__`` calls :func:`coerce_fields`, so
every way of making one (:func:`validate_params` from a JSON conf or CLI options, a direct call,
``from_dict`` in a later DAG task) converts and checks it, and no step ever sees an unconverted
value. :class:`iadeep.experiment.ExperimentConfig` is the one in use. The rules come from each field's type annotation and its ``metadata`` bounds, so a new
field is validated without a new rule here:

- ``int``: an integer, or a whole-number float (JSON and Airflow's JSON Schema accept ``60.0``
  as an integer), converted to ``int``; never a bool, a fraction or a string.
- ``float``: an integer or a float (converted to ``float``); never a bool or a string; finite.
- ``bool`` / ``str``: exactly that type.
- ``tuple[str, ...]``: a list or tuple of strings (converted to a tuple).
- ``X | None``: ``None`` or an ``X``.
- ``metadata={"ge": a}`` / ``{"gt": a}``: lower bounds on numbers.

Errors are :class:`ConfigError` (a ``ValueError``) naming the parameter, raised before any work.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

__all__ = ["ConfigError", "coerce_fields", "validate_params"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the parameter and what was wrong.

    Attributes:
        parameter: The parameter's name (e.g. ``"jobs"``), or ``None`` when several are involved.
        reason: What was wrong, without the parameter prefix.
    """

    def __init__(self, parameter: str | None, reason: str) -> None:
        self.parameter = parameter
        self.reason = reason
        super().__init__(f"parameter {parameter!r}: {reason}" if parameter else reason)


def validate_params(cls: type[T], params: Mapping[str, Any]) -> T:
    """Build the dataclass ``cls`` from untyped parameters (a JSON conf, CLI options).

    Args:
        cls: A dataclass whose ``__post_init__`` calls :func:`coerce_fields`.
        params: Parameter name -> value; missing ones take the field's default.

    Returns:
        The typed configuration.

    Raises:
        ConfigError: An unknown parameter name (the message lists the known ones), a value of
            the wrong type, out of bounds, or refused by the configuration's own checks.
    """
    if not isinstance(params, Mapping):
        raise ConfigError(None, f"parameters must be a mapping of names to values, not {type(params).__name__}")
    known = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(params) - known)
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise ConfigError(unknown[0] if len(unknown) == 1 else None,
                          f"unknown parameter(s) {names}; known: {', '.join(sorted(known))}")
    try:
        return cls(**params)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(None, str(exc)) from exc


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce_fields(obj: Any) -> None:
    """Convert and check every field of the (frozen) dataclass instance ``obj`` in place.

    Raises:
        ConfigError: A value of the wrong type or out of its field's bounds (see module docs).
    """
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = _convert(f.name, hints[f.name], getattr(obj, f.name))
        _check_bounds(f, value)
        object.__setattr__(obj, f.name, value)


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _convert(name: str, hint: Any, value: Any) -> Any:  # noqa: PLR0911 - one branch per type
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"field {name!r}: unsupported annotation {hint!r}")
        return _convert(name, inner[0], value)
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(name, f"expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, f"expected an integer, got {_describe(value)}")
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(name, f"expected an integer, got {value!r} (a fraction)")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, f"expected a number, got {_describe(value)}")
        if not math.isfinite(value):
            raise ConfigError(name, f"expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(name, f"expected a string, got {_describe(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(name, f"expected a list, got {_describe(value)}")
        (item,) = (a for a in typing.get_args(hint) if a is not Ellipsis)
        return tuple(_convert(f"{name}[{i}]", item, v) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(name, f"expected a mapping, got {_describe(value)}")
        return dict(value)
    raise TypeError(f"field {name!r}: unsupported annotation {hint!r}")


def _check_bounds(f: dataclasses.Field[Any], value: Any) -> None:
    if value is None:
        return
    if "ge" in f.metadata and value < f.metadata["ge"]:
        raise ConfigError(f.name, f"must be at least {f.metadata['ge']}, got {value!r}")
    if "gt" in f.metadata and value <= f.metadata["gt"]:
        raise ConfigError(f.name, f"must be greater than {f.metadata['gt']}, got {value!r}")
