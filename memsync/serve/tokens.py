"""The tokens `memsync serve` admits: made once and shown once, kept as their SHA-256 only, in one
file per user that only this user can read, and seen by every running server at its next request.

A token is high-entropy random text, so one unsalted hash is enough to keep it (as GitHub keeps
its tokens): whoever reads the file learns names, kinds and dates, never a token that works.
Several servers of one user share the file; every change of it is made under a lock and lands by
an atomic rename, so a server reading it sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..config import data_dir
from ..errors import ArgumentError, StoreError
from .endpoint import write_private

TOKEN_FILE = "tokens.json"
PREFIX = "memsync_"  # a token says what it is, for secret scanners and for people
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KINDS = ("read", "write")
# a server notes a token's last use at most this often (seconds): a busy agent must not rewrite
# the file on every request
TOUCH_EVERY = 60.0


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


class Tokens:
    """The user's token file; read again whenever it changed on disk (a token added or revoked by
    `memsync token` while a server runs)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / TOKEN_FILE
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) last read
        self._by_digest: dict[str, Token] = {}

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
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._by_digest = None, {}
            return self._by_digest
        except OSError as exc:
            raise StoreError(f"cannot read the token file {self.path}: {exc.strerror}") from exc
        stamp = (found.st_ino, found.st_size, found.st_mtime_ns)
        if stamp != self._seen:
            self._by_digest = {token.sha256: token for token in self._read()}
            self._seen = stamp
        return self._by_digest

    def _read(self) -> list[Token]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [Token(name=name, **fields) for name, fields in data["tokens"].items()]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(
                f"cannot read the token file {self.path} ({exc.__class__.__name__}): "
                "remove it and add the tokens again with memsync token add"
            ) from exc

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
        """Note that `token` was used now, unless that was noted a moment ago."""
        now = time.time()
        if token.last_used is not None and now - token.last_used < TOUCH_EVERY:
            return
        with self._changing() as tokens:
            if token.sha256 in tokens:  # revoked meanwhile: it stays revoked
                tokens[token.sha256] = replace(tokens[token.sha256], last_used=now)

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Token]]:
        """The tokens, changed in place by the caller and written back under the lock."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot write the token file {self.path}: {exc.strerror}") from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            tokens = {token.sha256: token for token in self._read()}
            yield tokens
            self._write(tokens)
        finally:
            os.close(lock)

    def _write(self, tokens: dict[str, Token]) -> None:
        data = {
            "tokens": {
                token.name: {k: v for k, v in vars(token).items() if k != "name"}
                for token in tokens.values()
            }
        }
        try:
            write_private(str(self.path), data)
        except OSError as exc:
            raise StoreError(f"cannot write the token file {self.path}: {exc.strerror}") from exc
