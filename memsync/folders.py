"""The folders memsync makes for itself (its data folder, an index's folder): private whatever
the umask, because they hold the notes' text and the token file, and a token file in a folder
another user may write is refused."""

from __future__ import annotations

import os
from pathlib import Path


def make_private_folder(path: Path) -> None:
    """Make `path` and every missing folder above it, each readable and writable by this user
    only; folders that exist are left as they are."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # made at the same moment by another process
            pass
