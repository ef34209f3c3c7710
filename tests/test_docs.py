"""The documentation keeps up with the code: every command is in the CLI reference, every
setting and every worker class attribute in its table, and every relative link of the
README leads to a file of the repository.

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
