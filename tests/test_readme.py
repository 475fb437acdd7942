"""The README's Quickstart and Python example stay true."""

import pathlib
import re

import matplotlib

matplotlib.use("Agg")

README = (pathlib.Path(__file__).parents[1] / "README.md").read_text()


def test_quickstart_is_two_commands():
    block = re.search(r"## Quickstart\s+```bash\n(.*?)```", README, re.S).group(1)
    test_command = 'pip install -e ".[dev]" && pip install --no-deps "id-marl-eval==0.0.4" && pytest'
    assert block.strip().splitlines() == ['pip install -e ".[dev]" && jaxpo train', test_command]
    ci = (pathlib.Path(__file__).parents[1] / ".ci" / "run").read_text()
    assert ci.strip().splitlines()[-1] == test_command  # CI runs exactly the README's test command


def test_python_example_runs(tmp_path, monkeypatch):
    code = re.search(r"## Python API\s+```python\n(.*?)```", README, re.S).group(1)
    assert "num_updates=100" in code and 'out_dir="runs/compare"' in code
    small = code.replace("num_updates=100", "num_updates=10")  # the same program, one chunk
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(small, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.labels == [f"{s}/seed{k}" for s in ("mappo", "ippo") for k in (0, 1, 2)]
    assert (tmp_path / "runs" / "compare" / "metrics.csv").exists()
