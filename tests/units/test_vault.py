from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from memsync.vault import IgnoreRules, Skip, SkipFile, note_at, read_note, scan
from tests.conftest import as_nobody, write


def test_scan_finds_notes_and_skips_hidden_node_modules_and_ignored(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "a")
    write(tmp_path, "sub/b.markdown", "b")
    write(tmp_path, "sub/c.txt", "not a note")
    write(tmp_path, ".obsidian/x.md", "hidden")
    write(tmp_path, ".trash/y.md", "trash")
    write(tmp_path, "node_modules/pkg/readme.md", "dependency")
    write(tmp_path, ".hidden-note.md", "hidden file")
    write(tmp_path, "drafts/d.md", "ignored")
    write(tmp_path, "keep/secret.md", "ignored by pattern")
    write(tmp_path, ".memsyncignore", "drafts/\nsecret.md\n")
    assert sorted(scan(tmp_path).files) == ["a.md", "sub/b.markdown"]
    rules = IgnoreRules(tmp_path)
    assert rules.skips_path("drafts/new.md") and rules.skips_path(".git/x.md")
    assert rules.skips_path("x.md.swp") and rules.skips_path(".x.md.swp")
    assert not rules.skips_path("sub/new.md")


def test_symlinks_are_followed_inside_the_vault_only_and_loops_end(tmp_path: Path) -> None:
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    write(vault, "real/n.md", "inside")
    write(outside, "o.md", "outside")
    os.symlink(vault / "real", vault / "alias")
    os.symlink(outside, vault / "out")
    os.symlink(outside / "o.md", vault / "o-link.md")
    os.symlink(vault, vault / "real" / "loop")
    os.symlink(vault / "missing.md", vault / "broken.md")
    found = scan(vault)
    assert "real/n.md" in found.files
    assert not any(p.startswith("out/") for p in found.files)
    assert "o-link.md" not in found.files
    reasons = dict((s.path, s.reason) for s in found.skipped)
    assert "outside the vault" in reasons["out"]
    assert "outside the vault" in reasons["o-link.md"]
    assert reasons["broken.md"] == "broken symlink"
    assert (
        len([p for p in found.files if p.endswith("n.md")]) == 1
    )  # the alias leads to the same folder


def test_unicode_names_in_nfc_and_nfd_are_both_indexed(tmp_path: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café.md")
    nfd = unicodedata.normalize("NFD", "café.md")
    write(tmp_path, nfc, "nfc")
    write(tmp_path, nfd, "nfd")
    files = scan(tmp_path).files
    assert len(files) == len(os.listdir(tmp_path))
    for rel in files:
        assert read_note(tmp_path, rel, 1 << 20).text in ("nfc", "nfd")


def test_read_note_decodes_bad_utf8_with_a_warning_and_refuses_binary(tmp_path: Path) -> None:
    (tmp_path / "latin1.md").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    note = read_note(tmp_path, "latin1.md", 1 << 20)
    assert note.warning and "UTF-8" in note.warning
    assert note.text.startswith("caf")
    (tmp_path / "bin.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    with pytest.raises(SkipFile, match="binary"):
        read_note(tmp_path, "bin.md", 1 << 20)


def test_read_note_skips_files_over_the_size_limit_without_reading_them(tmp_path: Path) -> None:
    with open(tmp_path / "big.md", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(SkipFile, match="too large"):
        read_note(tmp_path, "big.md", 10 * 1024 * 1024)


def test_read_note_reports_vanished_files(tmp_path: Path) -> None:
    with pytest.raises(SkipFile, match="vanished"):
        read_note(tmp_path, "gone.md", 1 << 20)


def test_read_note_reports_permission_denied(world_readable: Path) -> None:
    write(world_readable, "private.md", "secret")
    write(world_readable, "public.md", "open")
    (world_readable / "private.md").chmod(0)
    (world_readable / "public.md").chmod(0o644)
    # as an unprivileged user: root reads everything
    assert as_nobody(lambda: read_note(world_readable, "public.md", 1 << 20).text) == "open"
    assert as_nobody(lambda: read_note(world_readable, "private.md", 1 << 20)) == (
        "SkipFile: permission denied"
    )


def test_a_file_name_that_is_not_utf8_is_skipped_with_its_reason(tmp_path: Path) -> None:
    write(tmp_path, "good.md", "fine")
    (tmp_path / os.fsdecode(b"bad\xffname.md")).write_text("unreadable name")
    (tmp_path / os.fsdecode(b"dir\xfe")).mkdir()
    write(tmp_path / os.fsdecode(b"dir\xfe"), "inner.md", "inside a badly named folder")
    found = scan(tmp_path)
    assert list(found.files) == ["good.md"]
    reasons = {s.path: s.reason for s in found.skipped}
    assert "not valid UTF-8" in reasons["bad\\xffname.md"]
    assert "not valid UTF-8" in reasons["dir\\xfe"]
    for path in reasons:
        path.encode("utf-8")  # storable and printable as is
    verdict = note_at(tmp_path, os.fsdecode(b"bad\xffname.md"), IgnoreRules(tmp_path))
    assert isinstance(verdict, Skip) and verdict.path == "bad\\xffname.md"


def test_loops_aliases_and_outside_links_are_reported_and_each_note_is_indexed_once(
    tmp_path: Path,
) -> None:
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    write(vault, "good/g1.md", "the real note")
    write(vault, ".private/p.md", "reachable only through a link")
    write(outside, "secret.md", "outside")
    os.symlink("loop.md", vault / "loop.md")
    os.symlink(vault / "good/g1.md", vault / "alias.md")
    os.symlink(vault / "good", vault / "good-alias")
    os.symlink(vault / ".private", vault / "exposed")
    os.symlink(outside / "secret.md", vault / "passwd-link.md")
    found = scan(vault)
    assert sorted(found.files) == ["exposed/p.md", "good/g1.md"]
    reasons = {s.path: s.reason for s in found.skipped}
    assert reasons["loop.md"] == "symlink loop"
    assert "good/g1.md" in reasons["alias.md"]
    assert "good/" in reasons["good-alias"]
    assert "outside the vault" in reasons["passwd-link.md"]


def test_an_event_path_is_judged_exactly_as_the_walk_judges_it(tmp_path: Path) -> None:
    """One function decides what is a note: every path the walk saw gets the same verdict."""
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    write(vault, "a.md", "a")
    write(vault, "sub/b.md", "b")
    write(vault, ".private/p.md", "p")
    write(vault, "drafts/d.md", "ignored")
    write(vault, ".memsyncignore", "drafts/\n")
    write(outside, "o.md", "outside")
    os.symlink(outside / "o.md", vault / "out.md")
    os.symlink(vault / "a.md", vault / "alias.md")
    os.symlink(vault / ".private", vault / "exposed")
    os.symlink(outside, vault / "sub" / "outdir")
    os.symlink("nowhere.md", vault / "broken.md")
    os.symlink("loop.md", vault / "loop.md")
    os.mkfifo(vault / "pipe.md")  # opening it to read would wait for a writer forever
    (vault / "folder.md").mkdir()
    rules = IgnoreRules(vault)
    found = scan(vault)
    skipped = {s.path: s for s in found.skipped}
    for rel in [*found.files, *skipped, "drafts/d.md", ".private/p.md", "sub/outdir/o.md"]:
        verdict = note_at(vault, rel, rules)
        expected = found.files.get(rel) or skipped.get(rel)
        if rel in ("sub/outdir", "good-alias"):
            continue  # folders: events name the notes inside them
        if rel == "sub/outdir/o.md":
            assert isinstance(verdict, Skip) and "outside" in verdict.reason
            continue
        assert verdict == expected, rel
    assert skipped["pipe.md"].reason == "not a regular file (a pipe, socket or device)"
    assert note_at(vault, "folder.md", rules) is None and "folder.md" not in skipped


def test_utf16_notes_are_decoded_and_say_so(tmp_path: Path) -> None:
    (tmp_path / "le.md").write_bytes("\ufeff# Café notes\n".encode("utf-16-le"))
    (tmp_path / "be.md").write_bytes("\ufeff# 端口 notes\n".encode("utf-16-be"))
    le = read_note(tmp_path, "le.md", 1 << 20)
    be = read_note(tmp_path, "be.md", 1 << 20)
    assert le.text == "# Café notes\n" and be.text == "# 端口 notes\n"
    assert le.warning == "decoded as UTF-16 (byte-order mark)"
    (tmp_path / "fake.md").write_bytes(b"\xff\xfe\x00\xd8")  # a BOM, then a lone surrogate
    with pytest.raises(SkipFile, match="binary"):
        read_note(tmp_path, "fake.md", 1 << 20)


def test_an_ignore_file_linked_from_outside_the_vault_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    write(root, "drafts/x.md", "# X\n")
    write(tmp_path, "elsewhere/rules", "drafts/\n")
    (root / ".memsyncignore").symlink_to(tmp_path / "elsewhere/rules")
    assert not IgnoreRules(root).skips_folder("drafts")
    (root / ".memsyncignore").unlink()
    write(root, ".memsyncignore", "drafts/\n")
    assert IgnoreRules(root).skips_folder("drafts")
