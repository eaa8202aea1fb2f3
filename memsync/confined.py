"""Files inside the vault reached from a descriptor of its root, one name at a time and never
through a symlink the kernel follows, so a link swapped in after a check leads nowhere outside.
A symlink is followed by reading it and walking its target again inside the vault: links within
the vault keep working, and a file is read, and a write lands, in the folder walked or nowhere."""

from __future__ import annotations

import errno
import os
import secrets
import stat as stat_mod
from pathlib import Path
from types import TracebackType

MAX_HOPS = 40  # symlinks followed on one path, as Linux's own limit

# Windows has no descriptor-relative calls: there the opened file's identity is checked instead
WALKS_BY_DESCRIPTOR = (
    os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would wait for a writer; fstat then refuses it
_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_FILE |= getattr(os, "O_BINARY", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC
_NEW |= getattr(os, "O_BINARY", 0)


class Refused(Exception):
    """A path that leads out of the vault, loops, or names what is not a note file; the message
    is the reason, shown to the user."""


def inside(real: str, root_real: str) -> bool:
    """Whether a real path is the vault's root or below it."""
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


def _parts(rel: str) -> list[str]:
    return [part for part in rel.split("/") if part not in ("", ".")]


class Place:
    """A name in a real folder of the vault, the folder held open: what a read opens and a write
    replaces. `real` is the vault-relative path the name has on disk (symlinks followed)."""

    def __init__(self, folder_fd: int | None, folder: list[str], name: str, root_real: str):
        self._fd = folder_fd  # None where the platform walks by name (Windows)
        self._root_real = root_real
        self.name = name
        self.real = "/".join([*folder, name])

    def __enter__(self) -> Place:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _path(self, name: str) -> str:
        return os.path.join(self._root_real, *self.real.split("/")[:-1], name)

    def open_file(self) -> int:
        """A read-only descriptor of the note, a regular file; FileNotFoundError when it is gone."""
        if self._fd is None:
            return _open_by_identity(self._root_real, self.real)
        try:
            fd = os.open(self.name, _FILE, dir_fd=self._fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # it became a symlink since it was walked
                raise Refused("changed into a symlink while being read") from None
            raise
        return _regular(fd)

    def writable(self, st: os.stat_result) -> bool:
        """Whether this user may write the note: its bits and the kernel's answer for its name."""
        if not st.st_mode & 0o222:
            return False
        if self._fd is None:
            return os.access(self._path(self.name), os.W_OK)
        return os.access(self.name, os.W_OK, dir_fd=self._fd, follow_symlinks=False)

    def replace(self, data: bytes, mode: int) -> None:
        """The new bytes land whole or not at all, under this name in this folder: a temporary
        file beside it, flushed, renamed over it; a crash leaves the old note or the new one."""
        temp = f".memsync-{secrets.token_hex(6)}.tmp"
        where = {} if self._fd is None else {"dir_fd": self._fd}
        target = self.name if self._fd is not None else self._path(self.name)
        temp_at = temp if self._fd is not None else self._path(temp)
        handle = os.open(temp_at, _NEW, 0o600, **where)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
                if hasattr(os, "fchmod"):
                    os.fchmod(out.fileno(), mode & 0o7777)
            if not hasattr(os, "fchmod"):
                os.chmod(temp_at, mode & 0o7777)
            if self._fd is None:
                os.replace(temp_at, target)
            else:
                os.replace(temp, self.name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException:
            try:
                os.unlink(temp_at, **where)
            except OSError:
                pass
            raise
        if self._fd is not None:  # the rename itself made durable
            os.fsync(self._fd)


def _regular(fd: int) -> int:
    st = os.fstat(fd)
    if stat_mod.S_ISREG(st.st_mode):
        return fd
    os.close(fd)
    if stat_mod.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder")
    raise Refused("not a regular file (a pipe, socket or device)")


def locate(root: Path, rel: str, *, make_folders: bool = False) -> Place:
    """The place a vault-relative path names, its folders walked from the vault's root with
    O_NOFOLLOW and every symlink on the way (the last name included) read and walked again from
    the root; Refused when one leads outside the vault or they loop. A last name that does not
    exist is the place to create it; `make_folders` creates missing folders on the way.
    FileNotFoundError (a folder missing), NotADirectoryError and PermissionError pass through."""
    root_real = os.path.realpath(root)
    if not WALKS_BY_DESCRIPTOR:
        return _locate_by_name(root_real, rel, make_folders)
    pending = _parts(rel)
    if not pending:
        raise Refused("names no note")
    folder: list[str] = []
    fd = os.open(root_real, _FOLDER)
    hops = 0
    try:
        while True:
            name = pending.pop(0)
            if name == "..":
                if not folder:
                    raise Refused("a symlink on its way leads outside the vault")
                pending = [*folder[:-1], *pending]  # walked again from the root, by name
                folder = []
                os.close(fd)
                fd = os.open(root_real, _FOLDER)
                continue
            if not pending:
                target = _link_target(fd, name)
                if target is None:
                    return Place(fd, folder, name, root_real)
            else:
                try:
                    child = _open_folder(fd, name, make_folders)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    target = _link_target(fd, name)
                    if target is None:
                        raise NotADirectoryError(errno.ENOTDIR, f"{name} is not a folder") from None
                else:
                    os.close(fd)
                    fd, folder = child, [*folder, name]
                    continue
            hops += 1
            if hops > MAX_HOPS:
                raise Refused("symlink loop")
            if os.path.isabs(target):
                pending = [*_from_root(target, root_real), *pending]
                folder = []
                os.close(fd)
                fd = os.open(root_real, _FOLDER)
            else:
                pending = [*_parts(target), *pending]
    except BaseException:
        os.close(fd)
        raise


def _open_folder(fd: int, name: str, make: bool) -> int:
    try:
        return os.open(name, _FOLDER, dir_fd=fd)
    except FileNotFoundError:
        if not make:
            raise
    try:
        os.mkdir(name, dir_fd=fd)
    except FileExistsError:
        pass  # made meanwhile by someone else: opened below like any folder
    return os.open(name, _FOLDER, dir_fd=fd)


def _link_target(fd: int, name: str) -> str | None:
    """What the symlink `name` points at, or None when it is not a symlink (or not there)."""
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


def _from_root(target: str, root_real: str) -> list[str]:
    """An absolute symlink target as names to walk from the vault's root; Refused outside it."""
    try:
        real = os.path.realpath(target)  # only where to walk: every name is checked on the way
    except (OSError, ValueError):
        raise Refused("a symlink on its way cannot be followed") from None
    if not inside(real, root_real):
        raise Refused("a symlink on its way leads outside the vault")
    return _parts(os.path.relpath(real, root_real).replace(os.sep, "/"))


def _locate_by_name(root_real: str, rel: str, make_folders: bool) -> Place:
    """Where names are walked by the kernel: the real path, checked inside the vault."""
    path = os.path.join(root_real, *_parts(rel))
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        raise Refused("changed while being read") from None
    if not inside(real, root_real) or real == root_real:
        raise Refused("a symlink on its way leads outside the vault")
    parts = _parts(os.path.relpath(real, root_real).replace(os.sep, "/"))
    if make_folders:
        os.makedirs(os.path.join(root_real, *parts[:-1]), exist_ok=True)
    return Place(None, parts[:-1], parts[-1], root_real)


def _open_by_identity(root_real: str, rel: str) -> int:
    """Open by name, then refuse unless the file opened is the one the checked path names now."""
    path = os.path.join(root_real, *rel.split("/"))
    fd = _regular(os.open(path, _FILE))
    try:
        opened = os.fstat(fd)
        now = os.stat(path, follow_symlinks=False)
        still = os.path.realpath(path) == path
    except OSError:
        os.close(fd)
        raise
    if not still or (opened.st_dev, opened.st_ino) != (now.st_dev, now.st_ino):
        os.close(fd)
        raise Refused("changed while being read")
    return fd
