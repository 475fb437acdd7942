"""The README is the front page: its Quickstart is the two commands CI runs, and its
Python example is the one the site's getting-started page runs (tests/test_docs.py).

File under test: ``README.md``."""

import pathlib
import re

ROOT = pathlib.Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
INSTALL = 'pip install uv && python -m uv pip install --compile-bytecode -e ".[dev]"'
TEST_COMMAND = f'{INSTALL} && python -m uv pip install --no-deps "id-marl-eval==0.0.4" && pytest && mkdocs build --strict'


def test_quickstart_is_two_commands():
    block = re.search(r"## Quickstart\s+```bash\n(.*?)```", README, re.S).group(1)
    assert block.strip().splitlines() == [f"{INSTALL} && jaxpo train", TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.strip().splitlines()[-1] == TEST_COMMAND  # CI runs exactly the README's test command
    started = (ROOT / "docs" / "getting-started.md").read_text()
    assert re.search(r"```bash\n(.*?)```", started, re.S).group(1) == block


def test_the_python_example_is_the_one_the_site_runs():
    example = re.search(r"## In Python.*?```python\n(.*?)```", README, re.S).group(1)
    started = (ROOT / "docs" / "getting-started.md").read_text()
    assert example == re.search(r"## A first experiment in Python.*?```python\n(.*?)```", started, re.S).group(1)
    assert len(example.strip().splitlines()) <= 20
