"""Paths walked inside the vault from its root's descriptor: links within the vault work, links
out of it, loops and anything but a regular file are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsync import confined
from memsync.confined import Refused, locate
from tests.conftest import write

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symlinks need privileges on Windows")


def read(root: Path, rel: str) -> str:
    with locate(root, rel) as place:
        fd = place.open_file()
    with open(fd, encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture(params=["descriptors", "names"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each case by descriptors, and as a platform without them (Windows) walks by name."""
    if request.param == "names":
        monkeypatch.setattr(confined, "WALKS_BY_DESCRIPTOR", False)
    return str(request.param)


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    write(root, "notes/real.md", "real\n")
    write(tmp_path, "outside/secret.md", "secret\n")
    return root


def test_symlinks_inside_the_vault_are_followed(vault: Path, walk: str) -> None:
    (vault / "alias.md").symlink_to("notes/real.md")
    (vault / "absolute.md").symlink_to(vault / "notes/real.md")
    (vault / "linked").symlink_to("notes")
    (vault / "notes/up.md").symlink_to("../notes/./real.md")
    for rel in ("alias.md", "absolute.md", "linked/real.md", "notes/up.md", "linked/up.md"):
        assert read(vault, rel) == "real\n", rel
    with locate(vault, "linked/up.md") as place:
        assert place.real == "notes/real.md"


def test_symlinks_leading_out_are_refused(vault: Path, walk: str) -> None:
    (vault / "out.md").symlink_to(vault.parent / "outside/secret.md")
    (vault / "up.md").symlink_to("../outside/secret.md")
    (vault / "door").symlink_to("../outside")
    (vault / "notes/deep.md").symlink_to("../../outside/secret.md")
    for rel in ("out.md", "up.md", "door/secret.md", "notes/deep.md"):
        with pytest.raises(Refused, match="outside the vault"):
            read(vault, rel)


def test_a_loop_is_refused(vault: Path) -> None:
    (vault / "a.md").symlink_to("b.md")
    (vault / "b.md").symlink_to("a.md")
    with pytest.raises(Refused, match="loop"):
        read(vault, "a.md")


def test_only_a_regular_file_is_opened(vault: Path) -> None:
    os.mkfifo(vault / "pipe.md")  # opening it to read would wait forever for a writer
    with pytest.raises(Refused, match="not a regular file"):
        read(vault, "pipe.md")
    (vault / "folder.md").mkdir()
    with pytest.raises(IsADirectoryError):
        read(vault, "folder.md")
    with pytest.raises(FileNotFoundError):
        read(vault, "missing/x.md")
    with pytest.raises(NotADirectoryError):
        read(vault, "notes/real.md/x.md")


def test_a_write_lands_in_the_folder_walked(vault: Path, walk: str) -> None:
    (vault / "linked").symlink_to("notes")
    with locate(vault, "linked/new.md") as place:
        place.replace(b"new\n", 0o640)
    assert (vault / "notes/new.md").read_bytes() == b"new\n"
    assert (vault / "notes/new.md").stat().st_mode & 0o777 == 0o640
    with locate(vault, "made/here/new.md", make_folders=True) as place:
        place.replace(b"made\n", 0o644)
    assert (vault / "made/here/new.md").read_text() == "made\n"
    assert not [p for p in vault.rglob(".memsync-*")]  # no temporary file left
