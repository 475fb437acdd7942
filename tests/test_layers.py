"""The layers contract (``pyproject.toml``'s ``[tool.importlinter]``, docs/design.md §2)
holds, and it has teeth: an upward import or a cycle planted in a copy breaks it."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(root: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": root}  # the copy's jaxpo before the installed one
    return subprocess.run([LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_contract_is_kept():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 4 kept, 0 broken." in proc.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("layers")
    for name in ("jaxpo", "envs"):
        shutil.copytree(os.path.join(ROOT, name), root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), root)
    return root


@pytest.mark.parametrize("module, line, broken", [
    ("jaxpo/core/gae.py", "from jaxpo.program import config", "jaxpo layers"),  # maths importing the program
    ("jaxpo/run/events.py", "from jaxpo.run import driver", "no import cycle"),  # a cycle inside the run layer
    ("envs/base.py", "import jaxpo.core.losses", "environments import nothing of jaxpo"),
    ("jaxpo/run/checkpoint.py", "from jaxpo.run.loggers import MetricsCSV", "checkpoints hold state"),
])
def test_a_planted_violation_breaks_the_contract(copy, module, line, broken):
    path = copy / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{line}  # planted\n")
        proc = lint(str(copy))
    finally:
        path.write_text(original)
    assert proc.returncode != 0
    assert f"{broken}" in proc.stdout and "BROKEN" in proc.stdout.split(broken, 1)[1].splitlines()[0], proc.stdout
