"""The house rules a reviewer would otherwise check by hand (docs/design.md §2): every module
stays small enough to read, and every ``jaxpo.x.y`` a docstring names is a current path."""

import ast
import importlib
import io
import pathlib
import re
import tokenize

import pytest

import jaxpo

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_CODE_LINES = 250
DOTTED = re.compile(r"\bjaxpo(?:\.[A-Za-z_]\w*)+")


def sources() -> list[pathlib.Path]:
    return sorted(p for folder in ("jaxpo", "envs") for p in (ROOT / folder).rglob("*.py"))


def docstring_nodes(tree: ast.AST) -> list[ast.Constant]:
    """The docstring constants of a module and of every class and function in it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.append(first.value)
    return found


def code_lines(source: str) -> int:
    """Lines holding code: docstrings, comments and blank lines are not counted."""
    docs = {line for node in docstring_nodes(ast.parse(source)) for line in range(node.lineno, node.end_lineno + 1)}
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(line for line in range(token.start[0], token.end[0] + 1) if line not in docs)
    return len(lines)


def test_code_lines_count_code_only():
    source = '"""Module\n\ndocstring."""\n\n# a comment\nx = 1  # trailing\n\n\ndef f(a,\n      b):\n    """Doc."""\n    return a\n'
    assert code_lines(source) == 4  # x = 1; def f(a, / b):; return a


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_250_code_lines(path):
    lines = code_lines(path.read_text())
    assert lines <= MAX_CODE_LINES, f"{path.name}: {lines} code lines"


def resolves(dotted: str) -> bool:
    """True when ``dotted`` is a module's real name (no alias of the flat 0.1 layout) followed by
    attributes, or one of the package's public names (``jaxpo.train``, ``jaxpo.support``) followed
    by attributes or submodules."""
    parts = dotted.split(".")
    if parts[1] in jaxpo.PUBLIC and parts[1] not in jaxpo.MODULES:
        return all_attributes(getattr(jaxpo, parts[1]), parts[2:])
    if parts[1] in jaxpo.MODULES:  # a public module: read as the module it names
        parts = jaxpo.PUBLIC[parts[1]].split(".") + parts[2:]
    for cut in range(len(parts), 1, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.__name__ == name and all_attributes(module, parts[cut:])
    return False


def all_attributes(obj, names) -> bool:
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def named_paths() -> list[tuple[str, str]]:
    found = set()
    for path in sources():
        for node in docstring_nodes(ast.parse(path.read_text())):
            for dotted in DOTTED.findall(node.value):
                found.add((str(path.relative_to(ROOT)), dotted.rstrip(".")))
    return sorted(found)


def test_docstrings_name_current_paths():
    stale = [f"{where}: {dotted}" for where, dotted in named_paths() if not resolves(dotted)]
    assert not stale, "docstrings name paths that do not resolve:\n" + "\n".join(stale)


def test_docstrings_carry_no_dated_measurements():
    """Figures and their dates live in docs/speed.md and benchmarks/results/; a docstring points there."""
    measured = re.compile(r"\b20\d\d-\d\d-\d\d\b|\d\s?(ms|µs)\b|\d\s?× (faster|slower)")
    found = [f"{path.relative_to(ROOT)}: {line.strip()}" for path in sources()
             for node in docstring_nodes(ast.parse(path.read_text()))
             for line in node.value.splitlines() if measured.search(line)]
    assert not found, "\n".join(found)


def test_a_stale_path_is_found():
    assert resolves("jaxpo.core.rollout.permutation") and resolves("jaxpo.train") and resolves("jaxpo.support.mappo")
    assert not resolves("jaxpo.rollout.RolloutState")  # the flat 0.1 layout's alias
    assert not resolves("jaxpo.core.rollout.no_such_function")
