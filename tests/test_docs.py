"""The README and docs/ stay true: the command reference is every command's `--help` as it is now,
every docs/ page the README links to exists, and the README stays short."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import click
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.config import Config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMMANDS = ROOT / "docs" / "commands.md"
BEGIN = "<!-- BEGIN: generated from `memsync --help` by tests/test_docs.py -->"
END = "<!-- END: generated -->"
REGENERATE = "MEMSYNC_WRITE_DOCS=1 python -m pytest -q tests/test_docs.py"
README_MAX_LINES = 250
# read at import: the autouse isolated_env fixture clears MEMSYNC_* before each test runs
WRITE_DOCS = bool(os.environ.get("MEMSYNC_WRITE_DOCS"))


def help_text(args: list[str]) -> str:
    """What `memsync ARGS --help` prints on a terminal 100 columns wide."""
    result = CliRunner().invoke(
        main, [*args, "--help"], prog_name="memsync", terminal_width=100, max_content_width=100
    )
    assert result.exit_code == 0, result.output
    return result.output.rstrip()


def command_reference() -> str:
    """The generated part of docs/commands.md: `memsync --help`, then each command's."""
    sections = [("memsync", help_text([]))]
    sections += [(f"memsync {' '.join(path)}", help_text(path)) for path in command_paths()]
    return "\n\n".join(f"## `{title}`\n\n```text\n{text}\n```" for title, text in sections)


def command_paths(group: click.Group = main, above: tuple[str, ...] = ()) -> list[list[str]]:
    """Every command's words after `memsync`, a group's subcommands after the group."""
    paths: list[list[str]] = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        paths.append([*above, name])
        if isinstance(command, click.Group):
            paths += command_paths(command, (*above, name))
    return paths


def with_reference(page: str, reference: str) -> str:
    """The page with the text between its markers replaced by the reference."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{reference}\n{END}{tail}"


def test_command_reference_is_every_commands_help_as_it_is_now() -> None:
    page = COMMANDS.read_text(encoding="utf-8")
    assert BEGIN in page and END in page, f"docs/commands.md lost its markers {BEGIN!r} {END!r}"
    rendered = with_reference(page, command_reference())
    if WRITE_DOCS:
        COMMANDS.write_text(rendered, encoding="utf-8")
        page = rendered
    assert page == rendered, f"docs/commands.md differs from `memsync --help`: run {REGENERATE}"


def test_with_reference_replaces_only_the_text_between_the_markers() -> None:
    page = f"# Commands\n\nintro\n\n{BEGIN}\nold help\n{END}\n\n## Exit codes\n"
    assert with_reference(page, "new help") == (
        f"# Commands\n\nintro\n\n{BEGIN}\nnew help\n{END}\n\n## Exit codes\n"
    )


def test_every_command_has_help_and_a_section() -> None:
    reference = command_reference()
    for path in command_paths():
        command: click.Command | None = main
        for word in path:
            assert isinstance(command, click.Group)
            command = command.get_command(click.Context(command), word)
        assert command is not None and command.help, f"memsync {' '.join(path)} has no help"
        assert f"## `memsync {' '.join(path)}`" in reference
    assert ["token", "revoke"] in command_paths()


def local_links(markdown: str) -> list[str]:
    """The relative file targets of a page's Markdown links, without their #anchors; not in code
    (docs/links.md shows what a link in a note looks like)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", markdown))
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:|#", t)]


def test_local_links_finds_files_and_skips_urls_and_anchors() -> None:
    text = (
        "[a](docs/a.md#x) [b](https://x.org/b.md) [c](#here) [d](benchmarks/NOTES.md) `[e](e.md)`"
    )
    assert local_links(text) == ["docs/a.md", "benchmarks/NOTES.md"]


def test_readme_links_to_docs_pages_that_exist() -> None:
    links = local_links(README.read_text(encoding="utf-8"))
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"the README links to files that do not exist: {missing}"


def test_docs_pages_link_to_files_that_exist() -> None:
    for page in sorted((ROOT / "docs").glob("*.md")):
        links = local_links(page.read_text(encoding="utf-8"))
        missing = [link for link in links if not (page.parent / link).resolve().is_file()]
        assert not missing, f"docs/{page.name} links to files that do not exist: {missing}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(local_links(README.read_text(encoding="utf-8")))
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, f"docs/ pages the README does not link to: {sorted(pages - linked)}"


def test_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_every_setting_is_in_the_configuration_page() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [f.name for f in dataclasses.fields(Config) if f"`{f.name}`" not in page]
    assert not missing, f"docs/configuration.md does not document {missing}"


def documented_json(command: str) -> dict[str, object]:
    """The JSON object docs/commands.md shows after the line `$ memsync COMMAND ...--json`."""
    page = COMMANDS.read_text(encoding="utf-8")
    start = page.index("{", page.index(f"$ memsync {command} "))
    shown, _ = json.JSONDecoder().raw_decode(page[start:])
    assert isinstance(shown, dict)
    return shown


def keys(value: object) -> object:
    """A JSON value's shape: its objects' keys, nested, and a list of objects as its first one's."""
    if isinstance(value, dict):
        return {key: keys(item) for key, item in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [keys(value[0])]
    return None


def test_the_json_shapes_shown_are_what_the_commands_print(tmp_path: Path) -> None:
    vault = tmp_path / "notes"
    (vault / "daily").mkdir(parents=True)
    (vault / "daily" / "2026-11-10.md").write_text("# OPS-1432\n\nOPS-1432 postmortem published.\n")
    runner = CliRunner()

    def printed(*args: str) -> object:
        result = runner.invoke(main, [*args, "--json"])
        assert result.exit_code == 0, result.output
        return keys(json.loads(result.stdout))

    assert printed("index", str(vault), "--provider", "none") == keys(documented_json("index"))
    assert printed("query", "OPS-1432", "--vault", str(vault)) == keys(documented_json("query"))
    assert printed("status", "--vault", str(vault)) == keys(documented_json("status"))


def test_the_development_page_names_every_module() -> None:
    """docs/development.md's table is the map of the house: a module it does not name is a room
    nobody was shown."""
    page = (ROOT / "docs" / "development.md").read_text()
    package = ROOT / "memsync"
    unnamed = [
        module.relative_to(package).as_posix()
        for module in sorted(package.rglob("*.py"))
        if module.name != "__init__.py"
        and f"`{module.relative_to(package).as_posix()}`" not in page
        and f"`{module.name}`" not in page
    ]
    assert unnamed == []
