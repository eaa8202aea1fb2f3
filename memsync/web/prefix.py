"""The search page's folder: an unguessable path, one per installation, kept next to the token
file, under which the page, its login address and its session cookie live.

Browsers keep cookies per host, not per port: any other server on 127.0.0.1 that a browser visits
is sent every cookie whose Path matches. Bound to this folder, the session cookie reaches only a
server asked for this very path, and no other server knows it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

from ..config import make_private_folder
from ..errors import StoreError
from .tokens import FILE_FLAGS

PREFIX_FILE = "page-prefix"
SHAPE = re.compile(r"[A-Za-z0-9_-]{22,86}")  # token_urlsafe(16): 128 random bits


def page_prefix(folder: Path) -> str:
    """The page's folder, as a path ("/Xk3..."): read from `folder`, made there the first time
    (0600, so that no other user of this machine learns it); the same across restarts, so that
    bookmarks keep working."""
    path = folder / PREFIX_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        make_private_folder(folder)
        _make(path)
        return _read(path)
    except OSError as exc:
        raise StoreError(f"cannot make the page's folder name in {path}: {exc.strerror}") from exc


def _make(path: Path) -> None:
    """Write a new name beside `path` and link it there: a server starting at the same moment
    makes its own, and the first link wins for both (a reader never sees half a file)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(16) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


def _read(path: Path) -> str:
    try:  # as the token file is opened: no link followed, no wait on a pipe in its place
        with open(os.open(path, FILE_FLAGS), encoding="ascii", errors="replace") as file:
            found = os.fstat(file.fileno())
            name = file.read().strip() if stat.S_ISREG(found.st_mode) else ""
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StoreError(
            f"cannot read the page's folder name in {path}: {exc.strerror} (remove it: a new "
            "name is made at the next start)"
        ) from exc
    if found.st_uid != os.geteuid() or stat.S_IMODE(found.st_mode) & 0o077:
        raise StoreError(
            f"{path} must be this user's and readable by no one else: remove it (a new name is "
            "made at the next start), or chmod 600 it"
        )
    if not SHAPE.fullmatch(name):
        raise StoreError(f"{path} holds no page folder name: remove it (a new one is made)")
    return f"/{name}"
