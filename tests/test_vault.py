from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest
from conftest import write

from memsync.vault import IgnoreRules, SkipFile, read_note, scan


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


def test_read_note_reports_permission_denied(tmp_path: Path) -> None:
    write(tmp_path, "private.md", "secret")
    (tmp_path / "private.md").chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(SkipFile, match="permission denied"):
            read_note(tmp_path, "private.md", 1 << 20)
        return
    # root reads everything: check as an unprivileged user in a forked child
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(reader)
        try:
            os.setgid(65534)
            os.setuid(65534)
            read_note(tmp_path, "private.md", 1 << 20)
            message = b"read it"
        except SkipFile as skip:
            message = str(skip).encode()
        except BaseException as exc:  # noqa: BLE001
            message = repr(exc).encode()
        os.write(writer, message)
        os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    with os.fdopen(reader, "rb") as handle:
        assert handle.read().decode() == "permission denied"
