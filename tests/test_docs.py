"""The documentation keeps up with the code: every command is in the CLI reference, every
setting and every worker class attribute in its table, and every relative link of the
README leads to a file of the repository. The README stays a short front page whose
set-up CI runs word for word, which lists every page and whose benchmark rows are in the
benchmarks page.

(`.ci/run` also builds the site with `mkdocs build --strict`: a broken link inside the
docs or a renamed API fails there.)"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from lowkiq.cli import main
from lowkiq.cli.support import LazyGroup
from lowkiq.settings import Settings
from lowkiq.worker import Worker

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_of_lowkiq_is_in_the_cli_reference() -> None:
    # mkdocs-click documents the group's own commands by itself, but not those a
    # LazyGroup imports on demand: each of those needs a directive of its own.
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    directives = {
        f"{module}:{command}"
        for module, command in re.findall(
            r"::: mkdocs-click\n\s+:module: (\S+)\n\s+:command: (\S+)", page
        )
    }
    assert "lowkiq.cli:main" in directives
    assert isinstance(main, LazyGroup)
    lazy = main.lazy_commands.items()
    missing = {name: target for name, target in lazy if target not in directives}
    assert not missing, f"docs/reference/cli.md has no mkdocs-click directive for {missing}"


def test_the_readme_links_only_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [link.split("#", 1)[0] for link in links if "://" not in link]
    assert relative, "the README links into the docs"
    assert not [link for link in relative if not (ROOT / link).is_file()]
    # A package index shows the README without the repository: no images by path.
    assert not re.search(r"!\[[^\]]*\]\((?![a-z]+://)", readme)


def test_every_setting_has_a_row_in_the_settings_reference() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    # A row's first cell names one setting, or several: `dump_payload` / `load_payload`.
    first_cells = re.findall(r"^\| ((?:`[a-z_]+`(?: / )?)+) \|", page, re.M)
    documented = {name for cell in first_cells for name in re.findall(r"`([a-z_]+)`", cell)}
    fields = {f.name for f in dataclasses.fields(Settings) if not f.name.startswith("_")}
    assert fields - documented == set(), "settings missing from docs/reference/settings.md"
    assert documented - fields == set(), "docs/reference/settings.md names unknown settings"


def test_every_worker_class_attribute_has_a_row_in_the_concepts_page() -> None:
    page = (ROOT / "docs" / "concepts" / "ids-and-shards.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", page, re.M))
    attributes = {
        name
        for name, annotation in Worker.__annotations__.items()
        if str(annotation).startswith("ClassVar") and not name.startswith("_")
    }
    assert attributes, "Worker declares its class attributes as ClassVar"
    assert attributes - documented == set(), "missing from docs/concepts/ids-and-shards.md"
    assert documented - attributes == set(), "unknown attributes in docs/concepts/ids-and-shards.md"


README_MAX_LINES = 200


def sh_lines(markdown: str) -> list[str]:
    """The lines of the page's ``sh`` blocks, comments and blank lines left out."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, re.S):
        lines += [line for line in block.splitlines() if line and not line.startswith("#")]
    return lines


def section(markdown: str, heading: str) -> str:
    """The text under ``## heading``, up to the next ``## `` heading."""
    start = markdown.index(f"## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else len(markdown)]


def test_the_readme_stays_a_short_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines: keep it at most {README_MAX_LINES} and move "
        "details into docs/"
    )


def test_ci_runs_the_readme_set_up_word_for_word() -> None:
    # The set-up: a virtual environment, the example app, the tests; .ci/run makes
    # the same environment on a clean clone and runs the same test command in it.
    set_up = sh_lines(section((ROOT / "README.md").read_text(), "Set-up"))
    venv, example, tests = set_up
    assert venv == "python3 -m venv .venv && . .venv/bin/activate"
    assert example.endswith("&& python -m examples.orders")
    assert tests.endswith("&& python -m pytest")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert venv in ci and tests in ci, ".ci/run must run the README's set-up as written"
    assert ci.index(venv) < ci.index(tests)
    # Getting started shows the same commands.
    started = sh_lines(section((ROOT / "docs" / "getting-started.md").read_text(), "Try it first"))
    assert started == set_up


def linked_pages(markdown: str, prefix: str) -> set[str]:
    """The pages under ``prefix`` the page links to, anchors left out."""
    links = re.findall(r"\]\(([^)\s#]+)", markdown)
    return {link.removeprefix(prefix) for link in links if link.startswith(prefix)}


def test_the_readme_and_the_home_page_list_every_page_of_the_docs() -> None:
    pages = {
        str(path.relative_to(ROOT / "docs"))
        for folder in ("concepts", "guides", "reference")
        for path in (ROOT / "docs" / folder).glob("*.md")
    }
    assert "guides/long-jobs.md" in pages
    readme = linked_pages((ROOT / "README.md").read_text(), "docs/")
    home = linked_pages((ROOT / "docs" / "index.md").read_text(), "")
    assert pages - readme == set(), "pages the README's Documentation list lacks"
    assert pages - home == set(), "pages docs/index.md lacks"


def table_rows(markdown: str) -> list[str]:
    """The body rows of the page's first ``| benchmark | measured | target |`` table."""
    start = markdown.index("| benchmark | measured | target |")
    rows = []
    for line in markdown[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readme_benchmark_rows_are_figures_of_the_benchmarks_page() -> None:
    # The README shows a few headline rows; the benchmarks page keeps every row, so a
    # figure dropped from the README is not lost, and one updated in both agrees.
    readme = table_rows((ROOT / "README.md").read_text())
    at_a_glance = table_rows(section((ROOT / "docs" / "benchmarks.md").read_text(), "At a glance"))
    assert 1 <= len(readme) <= 5
    assert [row for row in readme if row not in at_a_glance] == []
    assert len(at_a_glance) > len(readme)
