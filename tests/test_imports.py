"""``jaxpo/__init__.py``: ``import jaxpo`` is cheap, and every public module and every
module name of the flat 0.1 layout imports as a statement, to the module it stands for."""

import subprocess
import sys

import jaxpo

CHECK = """
import sys
import jaxpo
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "flax", "numpy", "jaxpo"))
assert loaded == ["jaxpo", "jaxpo._malloc", "jaxpo._version"], loaded
import jaxpo.support
import jaxpo.rollout
from jaxpo.support import mappo
assert jaxpo.support is jaxpo.core.support and jaxpo.rollout is jaxpo.core.rollout
assert jaxpo.support.__spec__.name == "jaxpo.core.support"  # the real module's own spec, untouched
assert mappo is jaxpo.core.support.mappo
"""


def test_import_jaxpo_loads_nothing_and_aliases_import_as_statements():
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_every_public_module_and_moved_name_imports_to_its_module():
    import importlib

    for name in [*jaxpo.MODULES, *jaxpo.MOVED]:
        alias = importlib.import_module(f"jaxpo.{name}")
        assert alias is getattr(jaxpo, name), name
        assert alias.__name__ != f"jaxpo.{name}" or name == "envs", name  # the module's own home, not a copy
