"""The public surface of jaxpo, shared by the tests that hold its documentation to
account: the docstrings (test_docstrings.py) and the built API reference (test_docs.py).

Imported as a plain module (`from publicapi import ...`), like runtools.
"""

import inspect

import jaxpo
import jaxpo.envs


def public_objects():
    """(qualified name, object) for every public name, the public members of the public
    modules (``support``, ``losses``, ``envs``) and every public method of a public class."""
    out = []

    def add_class(qualname, cls):
        out.append((qualname, cls))
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            defined = getattr(member.fget if isinstance(member, property) else member, "__module__", "")
            if defined.startswith("jaxpo"):  # not what a library generates (flax's ``replace``)
                out.append((f"{qualname}.{name}", member))

    for module in (jaxpo, jaxpo.envs):
        for name in module.__all__:
            value = getattr(module, name)
            qualname = f"{module.__name__}.{name}"
            if inspect.ismodule(value):
                for member_name, member in vars(value).items():
                    if member_name.startswith("_") or getattr(member, "__module__", None) != value.__name__:
                        continue
                    if inspect.isclass(member):
                        add_class(f"{qualname}.{member_name}", member)
                    elif inspect.isfunction(member):
                        out.append((f"{qualname}.{member_name}", member))
            elif inspect.isclass(value):
                add_class(qualname, value)
            else:
                out.append((qualname, value))
    return sorted({q: o for q, o in out}.items())


def reference_anchor(qualname: str) -> tuple[str, str]:
    """Where the API reference documents a public name: ``(page under docs/reference/, anchor id)``.
    ``jaxpo.support`` and ``jaxpo.losses`` have pages of their own; ``jaxpo.envs`` is the
    ``envs`` folder installed under another name, so its anchors are ``envs.<name>``."""
    module = qualname.split(".")[1]
    if module in ("support", "losses"):
        return module, qualname
    if module == "envs":
        return "envs", qualname.removeprefix("jaxpo.")
    return "jaxpo", qualname
