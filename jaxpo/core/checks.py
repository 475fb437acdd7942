"""Errors that carry the field they are about, and the checks every layer shares.

A ``FieldError`` holds the path of the field (or argument) whose value is wrong
(``config.num_envs``, ``run.checkpoint_every``, ``sweep.grid.lr``) and its message as
parts: text, and the fields it names (``Ref``, ``Setting``). Each door writes those
names in its own words from a table, path -> name: the command line as flags
(``--num-envs``, ``--on-nan mask``), ``jaxpo.train`` as its arguments. Nothing reads
the message's wording to find them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class Ref:
    """A field named inside a message.

    Attributes:
        path: the field's path (``config.critic_input``).
        shown: how the message names it unless a door has a name of its own (default: the path).
    """

    path: str
    shown: str | None = None


@dataclasses.dataclass(frozen=True)
class Setting:
    """A field set to a value inside a message: ``on_nan='mask'``, or ``--on-nan mask`` as a flag.

    Attributes:
        path: the field's path (``run.on_nan``).
        value: the value it is set to.
        shown: how the message names the field unless a door has a name of its own.
    """

    path: str
    value: Any
    shown: str | None = None


Part = str | Ref | Setting


class NamedMessage:
    """A message whose parts name fields, written in the words of whoever shows it."""

    parts: tuple

    def named(self, names: Mapping[str, str] | None = None, flags: bool = False) -> str:
        """The message with each field written as ``names`` calls it.

        Args:
            names: path -> the door's name of that field (``{"run.on_nan": "--on-nan"}``);
                a field not in it keeps the message's own name.
            flags: write a ``Setting`` of a named field as a flag and its value
                (``--on-nan mask``), not ``name=value``.

        Returns:
            The message text.
        """
        names = names or {}
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            name = names.get(part.path, part.shown or part.path)
            if isinstance(part, Ref):
                out.append(name)
            elif flags and part.path in names:
                out.append(f"{name} {part.value}")
            else:
                out.append(f"{name}={part.value!r}")
        return "".join(out)


class FieldError(NamedMessage, ValueError):
    """A value that a field (or an argument) rejects, with the field's path.

    ``str(err)`` is the message as the raising API names the field; ``err.named(table)``
    writes it with another door's names.

    Args:
        path: the field's path (``run.checkpoint_every``, ``hyper.lr``, ``sweep.grid.lr``)
            or, for a function's argument, the argument's name.
        *parts: the message: text, ``Ref`` and ``Setting`` parts. When the first part is
            text, the message starts with the field's own name and a space.
        shown: how this message names the field itself (default: its path), e.g.
            ``Config.num_envs``.

    Attributes:
        path: the field's path.
        parts: the message's parts, the field's own name first.
    """

    def __init__(self, path: str, *parts: Part, shown: str | None = None):
        if not parts or isinstance(parts[0], str):
            parts = (Ref(path, shown), " ", *parts)
        self.path, self.parts = path, parts
        super().__init__(self.named())

    def renamed(self, names: Mapping[str, str]) -> "FieldError":
        """This error as a door whose names are ``names`` shows it.

        Args:
            names: path -> the name the door gives that field (``{"run.seeds": "seeds"}``).

        Returns:
            A ``FieldError`` of the same path whose ``str`` uses those names.
        """
        parts = [part if isinstance(part, str) or part.path not in names
                 else dataclasses.replace(part, shown=names[part.path]) for part in self.parts]
        return type(self)._of(self.path, parts)

    @classmethod
    def saying(cls, path: str, *parts: Part) -> "FieldError":
        """The error about field ``path`` whose message is ``parts`` as given (wherever
        it names the field, a ``Ref`` says so).

        Args:
            path: the field's path.
            *parts: the whole message: text, ``Ref`` and ``Setting`` parts.

        Returns:
            The ``FieldError``.
        """
        return cls._of(path, parts)

    @classmethod
    def _of(cls, path: str, parts: tuple) -> "FieldError":
        err = cls.__new__(cls)
        err.path, err.parts = path, tuple(parts)
        ValueError.__init__(err, err.named())
        return err

    def __reduce__(self):  # picklable, for errors that cross processes
        return type(self)._of, (self.path, self.parts)


def positive_int(value: Any, path: str, shown: str | None = None) -> int:
    """``value`` as an int, checked to be a positive integer.

    Args:
        value: the value to check (a bool is never a count).
        path: the field's or argument's path, for the error.
        shown: how the error names it (default: ``path``).

    Returns:
        ``int(value)``.

    Raises:
        FieldError: ``<name> must be a positive integer, got <value>``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise FieldError(path, f"must be a positive integer, got {value!r}", shown=shown)
    return int(value)
