"""The documentation: the site builds from docs/ in strict mode (a broken link or anchor, a page left
out of the navigation, or a generated page that no longer matches the code fails the build), the
generated pages are current, and every command's --help ends with the page that explains it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

MKDOCS = [sys.executable, "-m", "mkdocs"]


def build(root: Path, out: Path) -> subprocess.CompletedProcess:
    # Material's end-of-life banner says how to switch it off; it warns of nothing in the site.
    return subprocess.run([*MKDOCS, "build", "--strict", "--site-dir", str(out)], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def warnings(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]


def nav_pages(nav) -> list[str]:
    """Every page of mkdocs.yml's navigation."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def mkdocs_config() -> dict:
    # mkdocs.yml may hold !!python tags (Material's emoji functions); the navigation is plain YAML.
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((REPO / "mkdocs.yml").read_text(), Loader=Loader)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The documentation sources (and every generated file the build checks) in a directory of
    their own, to break on purpose; unbroken, it builds without a warning."""
    from hpcvar.docpages import generated

    root = tmp_path_factory.mktemp("docs-copy")
    shutil.copy(REPO / "mkdocs.yml", root)
    shutil.copytree(REPO / "docs", root / "docs")
    for rel in generated(REPO):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    out = build(root, tmp_path_factory.mktemp("site"))
    assert out.returncode == 0 and not warnings(out), out.stderr[-3000:]
    return root


def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    out = build(REPO, tmp_path / "site")
    assert out.returncode == 0 and not warnings(out), out.stderr[-3000:]
    # Every page of the navigation became a page of the site, the generated reference among them.
    for page in nav_pages(mkdocs_config()["nav"]):
        html = tmp_path / "site" / (page[:-3] + "/index.html" if page != "index.md" else "index.html")
        assert html.is_file(), page
    assert "hpcvar import-reframe" in (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()


@pytest.mark.parametrize("breakage", ["broken link", "missing anchor", "page not in the navigation",
                                      "stale generated page"])
def test_the_strict_build_fails_on(breakage, copy, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(copy, root)
    page = root / "docs" / "getting-started" / "main-job.md"
    if breakage == "broken link":
        page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md).\n")
        expect = "no-such-page.md"
    elif breakage == "missing anchor":
        page.write_text(page.read_text() + "\nSee [settings](../settings.md#no-such-section).\n")
        expect = "no-such-section"
    elif breakage == "page not in the navigation":
        (root / "docs" / "orphan.md").write_text("# Orphan\n")
        expect = "orphan.md"
    else:
        cli = root / "docs" / "reference" / "cli.md"
        cli.write_text(cli.read_text().replace("hpcvar import-reframe", "hpcvar import-rfm", 1))
        expect = "docs/reference/cli.md is out of date"
    out = build(root, tmp_path / "site")
    assert out.returncode != 0 and warnings(out) and expect in out.stderr, out.stderr[-3000:]


def test_the_generated_pages_are_those_of_the_code(tmp_path):
    from hpcvar.docpages import generated

    for rel, text in generated(REPO).items():
        assert (REPO / rel).read_text() == text, f"{rel} is stale: run python -m hpcvar.docpages --write"
    # The check names a stale page and --write mends it.
    for rel in generated(REPO):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    (tmp_path / "docs" / "reference" / "cli.md").write_text("old\n")
    check = [sys.executable, "-m", "hpcvar.docpages", "--root", str(tmp_path)]
    out = subprocess.run(check, capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip() == \
        "docs/reference/cli.md: out of date; run python -m hpcvar.docpages --write"
    subprocess.run([*check, "--write"], check=True, capture_output=True)
    assert subprocess.run(check, capture_output=True, text=True).returncode == 0
    assert (tmp_path / "docs" / "reference" / "cli.md").read_text() == (REPO / "docs" / "reference" / "cli.md").read_text()


def test_every_commands_help_ends_with_the_page_that_explains_it():
    from hpcvar.cli import build_parser, docs_page
    from hpcvar.docpages import commands

    in_nav = set(nav_pages(mkdocs_config()["nav"]))
    parser = build_parser()
    paths = [(path, sub) for path, sub, _ in commands(parser)]
    assert len(paths) >= 30  # every command and subcommand
    reference = (REPO / "docs" / "reference" / "cli.md").read_text()
    for path, sub in [((), parser), *paths]:
        page = docs_page(path)
        file = page.split("#")[0]  # the anchor is checked by the strict build (the reference links it)
        assert (REPO / "docs" / file).is_file() and file in in_nav, (path, page)
        last = sub.format_help().rstrip().splitlines()[-1]
        assert last.startswith(f"Documentation: docs/{page}"), (path, last)
        if path:
            # ... and the reference shows the command with the same page and its every option.
            section = reference.split(f"## hpcvar {' '.join(path)} {{")[1].split("\n## ")[0]
            assert f"Explained in: [{page}](../{page})" in section, path
            for action in sub._actions:
                for option in action.option_strings if action.dest != "help" else ():
                    assert f"`{option}`" in section, (path, option)
    # As a user sees it.
    out = subprocess.run([sys.executable, "-m", "hpcvar", "inspect", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("Documentation: docs/how-to/inspect.md")
