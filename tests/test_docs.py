"""The documentation site: it builds under ``mkdocs build --strict`` (broken links,
missing anchors or API references and docstrings griffe cannot parse fail it), a
headless Chromium loads every page and finds a term with the site's search, and the
guides' code runs — Python blocks executed at small sizes, every ``jaxpo`` command line
checked by the CLI itself (parsed, and for ``train`` / ``sweep`` resolved with
``--print-config``, which validates every value before anything compiles)."""

import contextlib
import functools
import http.server
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import threading

import matplotlib
import pytest

import jaxpo.envs
from publicapi import public_objects, reference_anchor

matplotlib.use("Agg")

ROOT = pathlib.Path(__file__).parents[1]
DOCS = ROOT / "docs"
# The pages whose code is a user's to copy: getting started, concepts and the guides.
GUIDES = [DOCS / "getting-started.md", DOCS / "concepts.md", *sorted((DOCS / "guides").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# The guides' Python at CI sizes: (page, text in the block, what CI runs instead). Every
# replacement must apply, so a guide that changes its sizes changes this table too. Where
# they can, the CI sizes are those of a program another test or notebook builds (the
# session's compile cache then compiles it once): getting started trains notebook 01's,
# config-files test_train_schemes' MAPPO, resume the shared experiment of conftest
# (conftest.EXPERIMENT: its 2 seeds too).
SMALLER = [
    ("getting-started.md", "num_envs=32, num_steps=64", "num_envs=16, num_steps=64, num_epochs=2, num_minibatches=2"),
    ("getting-started.md", "seeds=[0, 1, 2]", "seeds=[0, 1]"),
    ("getting-started.md", "num_updates=100", "num_updates=10"),
    ("guides/config-files.md", 'run={"steps": 200_000',
     ('config={"num_envs": 4, "num_steps": 16, "updates_per_chunk": 2, "num_epochs": 2, "num_minibatches": 2, '
      '"hidden": (16,)}, run={"steps": 1024, "progress": False')),
    ("guides/resume.md", '{"env": "public_goods"}',
     '{"env": "public_goods", "num_envs": 8, "num_steps": 16, "updates_per_chunk": 1}'),
    ("guides/resume.md", '"steps": 200_000', '"steps": 2048, "seeds": 2, "progress": False'),
    ("guides/resume.md", '"steps": 400_000', '"steps": 4096'),
    ("guides/sweeps.md", 'run={"seeds": 8}', 'run={"seeds": 1, "steps": 2048, "progress": False}'),
    ("guides/evaluation.md", '"runs/<name>"', '"runs/compare"'),  # the run getting started trained
    ("guides/evaluation.md", "episodes=100", "episodes=4"),
    ("guides/writing-an-environment.md", "num_updates=60", "num_updates=30"),
]


def blocks(page: pathlib.Path, language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(page.read_text()) if lang == language]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    """The site, built strictly into a temporary directory by ``jaxpo docs --build``."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "jaxpo.cli", "docs", "--build", str(out)], cwd=ROOT,
                           capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page_and_the_api_reference(site):
    pages = {p.relative_to(site).parent.as_posix() for p in site.rglob("index.html")}
    assert {".", "getting-started", "concepts", "guides/sweeps", "guides/writing-an-environment", "analysis",
            "reference/jaxpo", "reference/envs", "notebooks/01_quickstart", "design"} <= pages
    html = {page: (site / "reference" / page / "index.html").read_text() for page in ("jaxpo", "support", "losses", "envs")}
    for qualname, _ in public_objects():  # every name test_docstrings.py holds to a docstring
        page, anchor = reference_anchor(qualname)
        assert f'id="{anchor}"' in html[page], f"{qualname} is not in the API reference"
    assert (site / "results" / "paper_claims" / "claim1.png").exists()  # the analysis's figures
    assert not (site / "results" / "paper_claims" / "claims.jsonl").exists()  # only figures are published


@pytest.fixture(scope="module")
def browser(site):
    """``(driver, base url)``: headless Chromium (Debian's ``chromium`` and
    ``chromium-driver``) over the built site, served on the loopback address."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        message = "the browser check needs Chromium: apt-get install chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs them (.ci/run): never a silent skip there
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Without conftest's preloaded malloc: Chromium exits at start with it.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    driver = webdriver.Chrome(options=options, service=Service(driver_path, env=env))
    driver.set_page_load_timeout(30)
    with contextlib.ExitStack() as stack:
        stack.callback(server.shutdown)
        stack.callback(driver.quit)
        yield driver, f"http://127.0.0.1:{server.server_address[1]}"


def test_every_page_loads_in_a_browser(site, browser, tmp_path):
    from selenium.webdriver.common.by import By

    driver, base = browser
    pages = sorted(p.relative_to(site).parent.as_posix() for p in site.rglob("index.html"))
    for page in pages:
        driver.get(f"{base}/{'' if page == '.' else page + '/'}")
        article = driver.find_element(By.CSS_SELECTOR, "article.md-content__inner")
        assert article.find_elements(By.TAG_NAME, "h1"), page
        assert len(article.text.split()) > 30, f"{page} shows almost nothing"
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, f"{page}: {errors}"  # a missing script, stylesheet or image
    for page in ("", "reference/jaxpo/", "notebooks/01_quickstart/"):
        driver.get(f"{base}/{page}")
        driver.save_screenshot(str(tmp_path / f"{page.strip('/').replace('/', '_') or 'home'}.png"))


def test_the_search_finds_a_term(browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver, base = browser
    driver.get(f"{base}/?q=halving")  # the search opens with the query, as a shared search link does
    results = WebDriverWait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a"))
    assert any("/guides/pbt/" in r.get_attribute("href") for r in results)


def smaller(page: pathlib.Path, code: str) -> str:
    for name, old, new in SMALLER:
        if page == DOCS / name and old in code:
            code = code.replace(old, new)
    return code


def test_every_size_replacement_applies():
    for name, old, _ in SMALLER:
        assert any(old in code for code in blocks(DOCS / name, "python")), (name, old)


def test_the_guides_python_runs(tmp_path, monkeypatch):
    """Every Python block of the guides, in page order, each page's blocks in one
    namespace (as a reader pastes them) and in one working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jaxpo.envs, "REGISTRY", dict(jaxpo.envs.REGISTRY))  # the guide registers RingMatch
    ran = []
    for page in GUIDES:
        namespace: dict = {}
        for code in blocks(page, "python"):
            exec(compile(smaller(page, code), str(page), "exec"), namespace)
            ran.append(page.name)
        if page.name == "writing-an-environment.md":
            result = namespace["result"]  # random play earns ~6 of 25 (a match is 1/4 likely); learnt, 25
            assert (result.initial_return() < 10).all() and (result.final_return() > 20).all()
    assert ran.count("writing-an-environment.md") == 3 and "getting-started.md" in ran
    assert (tmp_path / "runs" / "compare" / "metrics.csv").exists()
    assert (tmp_path / "episode.gif").stat().st_size > 0  # evaluation.md rendered the trained policy


def command_lines(code: str) -> list[tuple[list[str], str | None]]:
    """The ``jaxpo`` commands of a shell block, each with the file its output is
    redirected to (``> FILE``) or None: continuations joined, comments, leading
    ``VAR=value`` assignments and a trailing ``&`` dropped."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        words = [w for w in words if w != "&"]
        redirect = None
        if ">" in words:
            at = words.index(">")
            words, redirect = words[:at], words[at + 1]
        if words and words[0] == "jaxpo":
            commands.append((words[1:], redirect))
    return commands


GUIDE_BLOCKS = [(page.relative_to(DOCS).as_posix(), commands) for page in GUIDES + [DOCS / "speed.md"]
                for code in blocks(page, "bash") if (commands := command_lines(code))]


@pytest.mark.parametrize("page, commands", GUIDE_BLOCKS,
                         ids=[f"{page}:{' '.join(c[0][0])[:50]}" for page, c in GUIDE_BLOCKS])
def test_the_guides_commands_are_what_the_cli_takes(page, commands, tmp_path, monkeypatch, capsys):
    """Each shell block's commands in order, in one directory (``> my.yaml`` then
    ``--config my.yaml``): parsed, and ``train`` / ``sweep`` resolved with
    ``--print-config`` unless they read a run that a guide's earlier step trained."""
    from jaxpo.cli import build_parser, main

    monkeypatch.chdir(tmp_path)
    for argv, redirect in commands:
        argv = [a.replace("<name>", "demo").replace("<sweep>", "demo") for a in argv]
        args = build_parser().parse_args(argv)  # exits 2 on a flag or value the CLI does not take
        if args.command not in ("train", "sweep") or args.resume or (args.config or "").startswith("runs/"):
            continue
        if any(a.startswith("my_envs:") for a in argv):  # the writing-an-environment guide's module
            (tmp_path / "my_envs.py").write_text(blocks(DOCS / "guides" / "writing-an-environment.md", "python")[0])
            monkeypatch.syspath_prepend(str(tmp_path))
        printing = "--print-config" in argv
        assert main(argv if printing else [*argv, "--print-config"]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert "config:" in out
        if redirect:
            (tmp_path / redirect).write_text(out)


def test_the_readme_links_into_the_site():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(((?:docs|benchmarks|notebooks)/[^)#]*)", readme)
    assert len(targets) > 15
    for target in targets:
        assert (ROOT / target).exists(), target
