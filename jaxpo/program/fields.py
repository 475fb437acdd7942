"""Typed dataclass fields, read once for validation, config files, the CLI and docs.

A field's type annotation is its contract: ``Literal[...]`` lists the allowed
values, ``int`` / ``float`` / ``bool`` / ``str`` / ``tuple[int, ...]`` / ``X | None``
say what a value must be. ``coerce`` turns YAML or command-line text into such a
value (or raises a ``FieldError`` naming the field and the expected form);
``field_docs`` reads each field's one-line help from the class docstring's
``Attributes:`` section. Nothing here knows about jaxpo's own options.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import re
import types
import typing
from typing import Any, Literal, Mapping

import numpy as np

from jaxpo.core.checks import FieldError, Ref

NONE_WORDS = ("none", "null", "~")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> tuple:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def type_hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of a dataclass's fields (``from __future__`` strings evaluated)."""
    return dict(_type_hints(cls))


def choices(hint: Any) -> tuple | None:
    """The allowed values of a ``Literal`` type (also inside ``X | None``), else None."""
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    inner = optional_inner(hint)
    return choices(inner) if inner is not None else None


def optional_inner(hint: Any) -> Any:
    """``X`` for ``X | None`` / ``Optional[X]``, else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def describe(hint: Any) -> str:
    """The expected form of a value of type ``hint``, for error messages and help."""
    if (allowed := choices(hint)) is not None and optional_inner(hint) is None:
        return "one of " + ", ".join(map(str, allowed))
    inner = optional_inner(hint)
    if inner is not None:
        return f"{describe(inner)}, or none"
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a number"
    if hint is str:
        return "a string"
    if typing.get_origin(hint) is tuple:
        return "a list of integers" if typing.get_args(hint)[0] is int else "a list"
    return "a value"


def coerce(value: Any, hint: Any, name: str) -> Any:
    """``value`` (a Python/YAML value or command-line text) as a value of type ``hint``.

    Args:
        value: the value or text.
        hint: the type it must have (``int``, ``Literal[...]``, ``tuple[int, ...]``, ``X | None``, …).
        name: the field's path (``config.num_envs``), for the error.

    Returns:
        The value as that type (``"8"`` -> 8 for an ``int``).

    Raises:
        FieldError: ``<name> must be <expected form>, got <value>`` (an item of a tuple:
            ``<name>[i] must be …``).
    """

    def bad() -> FieldError:
        return FieldError(name, f"must be {describe(hint)}, got {value!r}")

    inner = optional_inner(hint)
    if inner is not None:
        if value is None or (isinstance(value, str) and value.strip().lower() in NONE_WORDS):
            return None
        return coerce(value, inner, name)
    if typing.get_origin(hint) is Literal:
        if any(value == a and type(value) is type(a) for a in typing.get_args(hint)):
            return value
        raise bad()
    if hint is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise bad()
    if hint is int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        raise bad()
    if hint is float:
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad() from None
        raise bad()
    if hint is str:
        if isinstance(value, str):
            return value
        raise bad()
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if isinstance(value, str):
            text = value.strip()
            try:
                value = ast.literal_eval(text) if text[:1] in "([" else [v for v in text.split(",") if v.strip()]
            except (ValueError, SyntaxError):
                raise bad() from None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = (value,)
        if not isinstance(value, (list, tuple)):
            raise bad()
        items = []
        for i, v in enumerate(value):
            try:
                items.append(coerce(v, item, name))
            except FieldError as err:  # the field's name, then which item
                raise FieldError.saying(name, Ref(name), f"[{i}]", *err.parts[1:]) from None
        return tuple(items)
    return value  # Any, Mapping, …: checked by the owner


def coerce_fields(obj: Any, prefix: str) -> None:
    """Coerces every field of the frozen dataclass ``obj`` to its annotated type in place
    (``"8"`` -> 8 for an ``int``), raising a ``FieldError`` that names ``prefix.field``."""
    for name, hint in type_hints(type(obj)).items():
        object.__setattr__(obj, name, coerce(getattr(obj, name), hint, f"{prefix}.{name}"))


def field_docs(cls: type) -> dict[str, str]:
    """``{field: help}`` from the ``Attributes:`` section of ``cls``'s docstring.

    Each entry is ``name: text`` at one indentation, continued on more-indented lines.
    """
    doc = cls.__doc__ or ""
    section = re.split(r"\n\s*Attributes:\s*\n", doc, maxsplit=1)
    if len(section) < 2:
        return {}
    lines = section[1].splitlines()
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    docs: dict[str, str] = {}
    current = None
    for line in lines:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth < indent:
            break
        match = re.match(r"(\w+):\s*(.*)", line.strip())
        if depth == indent and match:
            current = match.group(1)
            docs[current] = match.group(2)
        elif current is not None:
            docs[current] += " " + line.strip()
    return docs


@dataclasses.dataclass(frozen=True, eq=False)
class FrozenArray:
    """A read-only array that is hashed and compared by value, so that an array-valued
    environment argument (an adjacency matrix) can be part of a hashable ``Config``."""

    array: np.ndarray

    def __post_init__(self):
        array = np.array(self.array, copy=True)
        array.setflags(write=False)
        object.__setattr__(self, "array", array)

    def __hash__(self) -> int:
        return hash((self.array.shape, self.array.dtype.str, self.array.tobytes()))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FrozenArray)
            and self.array.shape == other.array.shape
            and self.array.dtype == other.array.dtype
            and bool(np.all(self.array == other.array))
        )

    def __repr__(self) -> str:
        return f"array({self.array.tolist()!r})"


def freeze(value: Any) -> Any:
    """A hashable stand-in for ``value``: numeric arrays and (nested) numeric lists become a
    ``FrozenArray``, other lists tuples, mappings sorted tuples of pairs."""
    if isinstance(value, FrozenArray):
        return value
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, np.ndarray)) or type(value).__module__.split(".")[0] in ("jax", "jaxlib"):
        array = np.asarray(value)
        if array.dtype.kind in "biuf":
            return FrozenArray(array)
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of ``freeze`` for consumers: a ``FrozenArray`` becomes a numpy array."""
    if isinstance(value, FrozenArray):
        return value.array
    if isinstance(value, tuple):
        return tuple(thaw(v) for v in value)
    return value


def plain(value: Any) -> Any:
    """``value`` as plain YAML / JSON data: tuples and arrays as lists, numpy scalars as Python numbers, NaN as None."""
    if isinstance(value, FrozenArray):
        return value.array.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
