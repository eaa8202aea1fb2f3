"""The tokens `memsync serve` admits: made once and shown once, kept as their SHA-256 only, in one
file per user that only this user can read, and seen by every running server at its next request.

A token is high-entropy random text, so one unsalted hash is enough to keep it (as GitHub keeps
its tokens): whoever reads the file learns names, kinds and dates, never a token that works.
Several servers of one user share the file; every change of it is made under a lock and lands by
an atomic rename, so a server reading it sees the old file or the new one, never half of one.

The file decides who gets in, so it is read only when it is trustworthy: a file itself (no link
to one), in a folder that is no link either, both this user's and writable by nobody else; else
one line says which and how to fix it. Each is checked on the descriptor that is then read, so
nothing can be swapped in between. (These are POSIX's owners and modes: serve runs on Linux and
macOS.) Checking a token needs no write: a server notes last uses in memory and writes them at
most once every TOUCH_EVERY seconds where it can, so a file it may only read still admits.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..config import data_dir, make_private_folder
from ..errors import ArgumentError, MemsyncError, StoreError, UnsafeFile, os_reason

log = logging.getLogger("memsync.http")
TOKEN_FILE = "tokens.json"
PREFIX = "memsync_"  # a token says what it is, for secret scanners and for people
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KINDS = ("read", "write")
# a server writes its tokens' last uses at most this often (seconds): a busy agent must not
# rewrite the file on every request
TOUCH_EVERY = 60.0
# no link followed, and no wait on a FIFO put where the file should be
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Token:
    """What the file keeps of one token: never the token itself."""

    name: str
    kind: str  # read | write
    sha256: str
    created: float
    last_used: float | None = None

    @property
    def writes(self) -> bool:
        return self.kind == "write"

    def listed(self) -> dict[str, Any]:
        """The token as `memsync token list --json` shows it: its hash left out too."""
        return {
            "name": self.name,
            "kind": self.kind,
            "created": self.created,
            "last_used": self.last_used,
        }


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def checked_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ArgumentError(
            f"a token's name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit, not {name!r}"
        )
    return name


def trusted(descriptor: int, path: Path, what: str) -> os.stat_result:
    """The status of the open `path`, if it is this user's and nobody else may write it: else
    the one line that says so and what to do."""
    info = os.fstat(descriptor)
    if info.st_uid != os.geteuid():
        raise UnsafeFile(
            f"{what} {path} belongs to another user (uid {info.st_uid}), who could have added "
            f"tokens to it: memsync trusts only this user's (remove it, or chown it to this user)"
        )
    if info.st_mode & 0o022:
        raise UnsafeFile(
            f"{what} {path} can be written by other users, who could add tokens of their own: "
            f"chmod go-w {path}"
        )
    return info


def unopenable(exc: OSError, path: Path, what: str, kind: str) -> MemsyncError:
    """Why `path` (a `kind`: file or folder) could not be opened: a link in its place is
    refused, anything else said."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and path.is_symlink():
        return UnsafeFile(
            f"{what} {path} is a symbolic link, and memsync follows none there: put the {kind} "
            "itself in its place"
        )
    return StoreError(f"cannot read {what} {path}: {os_reason(exc)}")


class Tokens:
    """The user's token file; read again whenever it changed on disk (a token added or revoked by
    `memsync token` while a server runs)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / TOKEN_FILE
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) last read
        self._by_digest: dict[str, Token] = {}
        self._used: dict[str, float] = {}  # digest -> last use noted here, not yet written
        self._written = 0.0  # when last uses were last written (or tried)
        self._unwritable = False  # said once in the log

    # -- reading -----------------------------------------------------------------------------

    def all(self) -> list[Token]:
        return sorted(self._current().values(), key=lambda token: token.created)

    def verify(self, secret: str) -> Token | None:
        """The token `secret` is, None for one that is not (or no longer) in the file."""
        if not secret.startswith(PREFIX):
            return None
        return self._current().get(digest(secret))

    def still(self, token: Token) -> bool:
        """Whether `token` has not been revoked (nor revoked and made again under its name)."""
        return token.sha256 in self._current()

    def _current(self) -> dict[str, Token]:
        with self._folder(create=False) as folder:
            if folder is not None:
                found = self._load(folder, since=self._seen)
                if found is not None:
                    self._seen, self._by_digest = found
                return self._by_digest
        self._seen, self._by_digest = None, {}
        return self._by_digest

    @contextlib.contextmanager
    def _folder(self, create: bool) -> Iterator[int | None]:
        """A checked descriptor of the file's folder (made 0700 when `create`); None when it
        is missing."""
        folder = self.path.parent
        try:
            if create:
                make_private_folder(folder)
            descriptor = os.open(folder, FOLDER_FLAGS)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        except OSError as exc:
            raise unopenable(exc, folder, "the token file's folder", "folder") from exc
        try:
            trusted(descriptor, folder, "the token file's folder")
            yield descriptor
        finally:
            os.close(descriptor)

    def _load(
        self, folder: int, since: tuple[int, int, int] | None = None
    ) -> tuple[tuple[int, int, int] | None, dict[str, Token]] | None:
        """(its stamp, the tokens) of the file in `folder`, checked; None when its stamp is
        still `since` (unchanged since last read)."""
        try:
            descriptor = os.open(self.path.name, FILE_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None, {}
        except OSError as exc:
            raise unopenable(exc, self.path, "the token file", "file") from exc
        with contextlib.ExitStack() as closing:
            closing.callback(os.close, descriptor)
            info = trusted(descriptor, self.path, "the token file")
            if not stat.S_ISREG(info.st_mode):  # before open(), which says a folder in a riddle
                raise UnsafeFile(f"the token file {self.path} is not a file: remove it")
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
            if stamp == since:
                return None
            try:
                with open(descriptor, "rb", closefd=False) as file:
                    data = json.loads(file.read())
                tokens = [_token(name, fields) for name, fields in data["tokens"].items()]
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise StoreError(
                    f"cannot read the token file {self.path} ({exc.__class__.__name__}): "
                    "remove it and add the tokens again with memsync token add"
                ) from exc
        return stamp, {token.sha256: token for token in tokens}

    # -- changing ----------------------------------------------------------------------------

    def add(self, name: str, write: bool = False) -> str:
        """A new token named `name`; the one time it exists outside the caller's hands is here."""
        checked_name(name)
        secret = PREFIX + secrets.token_urlsafe(32)
        with self._changing() as tokens:
            if any(token.name == name for token in tokens.values()):
                raise ArgumentError(
                    f"a token named {name} exists: revoke it first (memsync token revoke {name}) "
                    "or choose another name"
                )
            kind = "write" if write else "read"
            token = Token(name, kind, digest(secret), time.time())
            tokens[token.sha256] = token
        return secret

    def revoke(self, name: str) -> Token:
        with self._changing() as tokens:
            found = [token for token in tokens.values() if token.name == name]
            if not found:
                raise ArgumentError(f"no token named {name}: memsync token list shows them")
            del tokens[found[0].sha256]
        return found[0]

    def touch(self, token: Token) -> None:
        """Note that `token` was used now: in memory, and in the file at most once every
        TOUCH_EVERY seconds (never a reason to refuse the request)."""
        now = time.time()
        self._used[token.sha256] = now
        if now - self._written >= TOUCH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the last uses noted here, where the file can be written: where it cannot (a
        file this server may only read), the log says so once, and tokens still admit."""
        self._written = time.time()
        used, self._used = self._used, {}
        if not used:
            return
        try:
            with self._changing() as tokens:
                for sha256, when in used.items():
                    if sha256 in tokens:  # revoked meanwhile: it stays revoked
                        tokens[sha256] = replace(tokens[sha256], last_used=when)
        except MemsyncError as exc:
            if not self._unwritable:
                log.warning("tokens' last use is not noted: %s", exc)
            self._unwritable = True

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Token]]:
        """The tokens, changed in place by the caller and written back under the lock."""
        lock_name = self.path.with_suffix(".lock").name
        try:
            with self._folder(create=True) as folder:
                assert folder is not None  # made if missing
                lock = os.open(lock_name, os.O_RDWR | os.O_CREAT | FILE_FLAGS, 0o600, dir_fd=folder)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    _, tokens = self._load(folder) or (None, {})
                    yield tokens
                    write_file(folder, self.path.name, _as_json(tokens))
                finally:
                    os.close(lock)
        except OSError as exc:
            raise StoreError(f"cannot write the token file {self.path}: {os_reason(exc)}") from exc


def _token(name: str, fields: dict[str, Any]) -> Token:
    """A token as the file keeps it, its fields' types checked (a TypeError says which is
    wrong): the file is trusted to be this user's, not to be well made."""
    token = Token(name=name, **fields)
    checks = {
        "name": NAME.fullmatch(token.name) is not None,
        "kind": token.kind in KINDS,
        "sha256": isinstance(token.sha256, str),
        "created": isinstance(token.created, (int, float)),
        "last_used": token.last_used is None or isinstance(token.last_used, (int, float)),
    }
    wrong = [field for field, right in checks.items() if not right]
    if wrong:
        raise TypeError(f"{name}: {', '.join(wrong)}")
    return token


def _as_json(tokens: dict[str, Token]) -> str:
    return json.dumps(
        {
            "tokens": {
                token.name: {k: v for k, v in vars(token).items() if k != "name"}
                for token in tokens.values()
            }
        },
        indent=1,
    )


def write_file(folder: int, name: str, text: str) -> None:
    """`text` as the file `name` in the open `folder`, whole or not at all: written to a new
    file beside it (0600, no link followed) and renamed over it, which replaces a link in its
    place rather than writing through it."""
    temporary = f".{name}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):  # left by a crash
        os.unlink(temporary, dir_fd=folder)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(temporary, flags, 0o600, dir_fd=folder), "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
