"""The page's folder: made once per installation, private, the same across restarts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsync.errors import StoreError
from memsync.web.prefix import PREFIX_FILE, page_prefix


def test_the_folder_is_made_once_private_and_kept(tmp_path: Path) -> None:
    first = page_prefix(tmp_path / "data")
    assert first.startswith("/") and len(first) > 20 and "/" not in first[1:]
    assert (tmp_path / "data" / PREFIX_FILE).stat().st_mode & 0o777 == 0o600
    assert page_prefix(tmp_path / "data") == first  # a restart: bookmarks keep working
    assert page_prefix(tmp_path / "other") != first  # another installation: another name
    assert [p.name for p in (tmp_path / "data").iterdir()] == [PREFIX_FILE]


def test_a_file_others_may_read_or_that_holds_no_name_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    page_prefix(tmp_path)
    (tmp_path / PREFIX_FILE).chmod(0o644)
    with pytest.raises(StoreError, match="readable by no one else"):
        page_prefix(tmp_path)
    (tmp_path / PREFIX_FILE).chmod(0o600)
    (tmp_path / PREFIX_FILE).write_text("../../etc\n")
    with pytest.raises(StoreError, match="holds no page folder name"):
        page_prefix(tmp_path)
    os.unlink(tmp_path / PREFIX_FILE)
    assert page_prefix(tmp_path) != "/../../etc"


@pytest.mark.parametrize("kind", ["link", "pipe"])
def test_a_link_or_a_pipe_in_the_file_s_place_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """Not followed, and not waited on: a pipe there would have held `serve` at its start."""
    target = tmp_path / "elsewhere"
    target.write_text("Pp1dlmLNaWqTNJ-Yt0mG2w\n")
    target.chmod(0o600)
    if kind == "link":
        (tmp_path / PREFIX_FILE).symlink_to(target)
    else:
        os.mkfifo(tmp_path / PREFIX_FILE, 0o600)
    with pytest.raises(StoreError, match="remove it"):
        page_prefix(tmp_path)
