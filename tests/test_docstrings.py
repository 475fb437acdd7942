"""Every public name of ``jaxpo`` and ``jaxpo.envs`` is documented in one style (Google's):
a docstring, an ``Args:`` entry for every parameter and an ``Attributes:`` entry for every
dataclass field. The docs site's API reference is these docstrings (``docs/reference/``)."""

import dataclasses
import inspect
import re

import pytest

import jaxpo.envs
from publicapi import public_objects

SECTION = re.compile(r"^(\w[\w ]*):\s*$")  # "Args:", "Returns:", ... alone on a line
ENTRY = re.compile(r"^(\*{0,2}\w+)(?: \([^)]*\))?:")  # "name:" or "name (type):"


def sections(doc: str) -> dict[str, set[str]]:
    """A Google-style docstring's sections -> the names its entries document."""
    found: dict[str, set[str]] = {}
    current, indent = None, None
    for line in doc.splitlines():
        stripped = line.strip()
        if SECTION.match(line):
            current, indent = SECTION.match(line).group(1), None
            found[current] = set()
        elif current and stripped:
            depth = len(line) - len(line.lstrip())
            if depth == 0:
                current = None
                continue
            indent = depth if indent is None else indent
            if depth == indent and ENTRY.match(stripped):
                found[current].add(ENTRY.match(stripped).group(1).lstrip("*"))
    return found


OBJECTS = public_objects()


def test_the_public_surface_is_what_the_reference_lists():
    names = {q for q, _ in OBJECTS}
    assert {"jaxpo.train", "jaxpo.Config", "jaxpo.support.khop", "jaxpo.losses.ppo_loss",
            "jaxpo.envs.make", "jaxpo.Trainer.run_multiple", "jaxpo.envs.Env.step"} <= names
    assert len(names) > 90


@pytest.mark.parametrize("qualname, obj", OBJECTS, ids=[q for q, _ in OBJECTS])
def test_public_name_is_documented(qualname, obj):
    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj)
    if isinstance(obj, dict):  # a registry: documented where the module says what it is
        doc = jaxpo.envs.__doc__ if qualname == "jaxpo.envs.REGISTRY" else None
    assert doc and len(doc.split()) >= 3, f"{qualname} has no docstring"
    found = sections(doc)
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        fields = {f.name for f in dataclasses.fields(obj) if not f.name.startswith("_")}
        missing = fields - found.get("Attributes", set())
        assert not missing, f"{qualname}: fields without an 'Attributes:' entry: {sorted(missing)}"
    if inspect.isfunction(obj):
        params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
        missing = set(params) - found.get("Args", set())
        assert not missing, f"{qualname}: parameters without an 'Args:' entry: {sorted(missing)}"
        unknown = found.get("Args", set()) - set(params)
        assert not unknown, f"{qualname}: 'Args:' names what the signature lacks: {sorted(unknown)}"
