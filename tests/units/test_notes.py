"""notes: reading lines and the one write memsync makes (an agent's), with what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.errors import ArgumentError
from memsync.notes import (
    check_writable,
    checked_path,
    parse_location,
    protected,
    read_lines,
    write_note,
)
from memsync.text import fold
from memsync.vault import IgnoreRules
from tests.conftest import as_nobody, write


@pytest.mark.parametrize(
    "name",
    [
        "MEMORY.md",
        "memory.md",
        "Memory.MD",
        "agents.md",
        "sub/Soul.md",
        "ＭＥＭＯＲＹ.md",
        "ＡＧＥＮＴＳ.ｍｄ",
    ],
)
def test_protected_names_match_case_folded_after_nfkc(name: str) -> None:
    assert protected(name, ())


def test_user_protect_globs_match_case_folded_too() -> None:
    assert protected("Projects/Heron.md", ("projects/*",))
    assert protected("keys.MD", ("*.md",)) and not protected("notes/keys.md", ("other/*",))


@pytest.mark.parametrize(
    "name",
    [
        "MEMORY\u200b.md",  # zero-width space
        "\u202eMEMORY.md",  # right-to-left override
        "a\u2066b.md",  # left-to-right isolate
        "\ufeffnote.md",  # byte-order mark
        "line\nbreak.md",
        "tab\there.md",
        "bell\x07.md",
        "folder\u202a/x.md",
    ],
)
def test_names_hiding_characters_are_refused_for_writes(tmp_path: Path, name: str) -> None:
    with pytest.raises(ArgumentError, match="invisible or control characters"):
        check_writable(name, ())


@pytest.mark.parametrize("name", ["می\u200cخواهم.md", "family-👨\u200d👩\u200d👧.md", "笔记.md"])
def test_zwj_and_zwnj_stay_allowed(tmp_path: Path, name: str) -> None:
    check_writable(name, ())


def test_the_name_on_disk_is_protected_too(tmp_path: Path) -> None:
    write(tmp_path, "MEMORY.md", "# memory\n")
    (tmp_path / "alias.md").symlink_to(tmp_path / "MEMORY.md")
    with pytest.raises(ArgumentError, match="protected"):
        write_note(tmp_path, "alias.md", "more", "append")
    assert (tmp_path / "MEMORY.md").read_text() == "# memory\n"


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_a_note_without_a_write_bit_is_never_written_even_by_root(
    tmp_path: Path, mode: str
) -> None:
    note = write(tmp_path, "locked.md", "# Locked\n")
    note.chmod(0o444)
    with pytest.raises(ArgumentError, match="locked.md is read-only"):
        write_note(tmp_path, "locked.md", "more", mode)
    assert note.read_text() == "# Locked\n" and note.stat().st_mode & 0o777 == 0o444
    assert [p.name for p in tmp_path.iterdir()] == ["locked.md"]  # no temporary file left


def test_a_note_another_user_owns_is_read_only_for_them(world_readable: Path) -> None:
    import os

    folder = world_readable / "vault"
    folder.mkdir()
    os.chmod(folder, 0o777)  # the folder would allow a rename over the note
    write(folder, "theirs.md", "# Theirs\n").chmod(0o644)
    said = as_nobody(lambda: write_note(folder, "theirs.md", "mine", "append"))
    assert "theirs.md is read-only" in said
    assert (folder / "theirs.md").read_text() == "# Theirs\n"


def test_a_folder_this_user_cannot_write_is_one_line(world_readable: Path) -> None:
    folder = world_readable / "vault"
    folder.mkdir()
    folder.chmod(0o755)
    said = as_nobody(lambda: write_note(folder, "new.md", "text", "create"))
    assert said.startswith("ArgumentError: cannot write new.md: Permission denied")


def test_ignore_rules_compare_names_case_folded(tmp_path: Path) -> None:
    write(tmp_path, ".memsyncignore", "drafts/\nSecret*.md\n")
    rules = IgnoreRules(tmp_path)
    for rel in ("drafts/a.md", "DRAFTS/a.md", "Drafts/a.md", "ＤＲＡＦＴＳ/a.md", "secret-plan.md"):
        assert rules.skips_path(rel), rel
    assert not rules.skips_path("drafting/a.md")
    assert rules.skips_dir("Node_Modules")
    write(tmp_path, "drafts/x.md", "# x\n")
    with pytest.raises(ArgumentError, match="hidden or ignored"):
        checked_path(tmp_path, "DRAFTS/x.md", rules)


def test_fold_is_nfkc_then_casefold() -> None:
    assert fold("ＭＥＭＯＲＹ.md") == "memory.md" and fold("Straße") == "strasse"
    assert fold("Notes/A.MD") == "notes/a.md"


def test_read_lines_and_locations(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "one\ntwo\nthree\n")
    lines = read_lines(tmp_path, "a.md", 2, 3, 1 << 20)
    assert lines.text == "two\nthree" and lines.citation == "a.md#L2-L3"
    assert parse_location("a.md:2-3") == ("a.md", 2, 3)
    assert parse_location("a.md") == ("a.md", None, None)
    with pytest.raises(ArgumentError, match="out of range"):
        read_lines(tmp_path, "a.md", 5, 6, 1 << 20)


def test_a_new_note_is_refused_where_a_folder_sits_or_a_folder_on_its_way_is_a_symlink(
    tmp_path: Path,
) -> None:
    rules = IgnoreRules(tmp_path)
    (tmp_path / "taken.md").mkdir()
    with pytest.raises(ArgumentError, match="taken.md: something other than a note file is there"):
        checked_path(tmp_path, "taken.md", rules, existing=False)
    write(tmp_path, "real/a.md", "# A\n")
    (tmp_path / "alias").symlink_to("real")
    with pytest.raises(ArgumentError, match="a folder on its way is a symlink"):
        checked_path(tmp_path, "alias/new/b.md", rules, existing=False)
    assert checked_path(tmp_path, "real/new/b.md", rules, existing=False) == "real/new/b.md"
