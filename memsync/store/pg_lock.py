"""One writer per PostgreSQL vault (a PgStore's), across machines: a session advisory lock,
with the holder's facts in memsync.writers for messages and `status`."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from ..redact import redact
from .lock import WriterLock
from .pg_connect import (
    LOCK_CLASS,
    SHARED,
    connect,
    database_error,
    ensure_shared,
    first_line,
    scalar,
)
from .protocols import translated, translating

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("memsync.pg")


def _lock_key(name: str) -> tuple[str, tuple[Any, ...]]:
    return "%s, hashtext(%s)", (LOCK_CLASS, f"{SHARED}:{name}")


@translating(database_error)
class AdvisoryLock(WriterLock):
    """One writer per vault across machines: a session advisory lock on its own connection (the
    server frees it when that session ends, so a killed writer leaves nothing stale); the
    holder's host, pid and role in memsync.writers for messages and `status`."""

    def __init__(self, url: str, name: str, role: str) -> None:
        super().__init__(f"{redact(url)} (vault {name})", role)
        self.url = url
        self.name = name
        self._conn: psycopg.Connection[Any] | None = None
        self._locked = False  # this session holds the advisory lock

    def _try(self) -> bool:
        if self._conn is None:
            self._conn = connect(self.url)
            ensure_shared(self._conn, create=True)
        keys, args = _lock_key(self.name)
        self._locked = bool(
            scalar(self._conn.execute(f"SELECT pg_try_advisory_lock({keys})", args))
        )
        return self._locked

    def _holder(self) -> dict[str, Any]:
        assert self._conn is not None
        return _holder_row(self._conn, self.name)

    def _write(self, facts: dict[str, Any]) -> None:
        """Best effort: facts for `status`; alive() is what tells whether the lock still holds."""
        import psycopg

        assert self._conn is not None
        try:
            self._conn.execute(
                f"INSERT INTO {SHARED}.writers(name, holder) VALUES(%s, %s) "
                "ON CONFLICT(name) DO UPDATE SET holder = excluded.holder",
                (self.name, json.dumps(facts)),
            )
        except psycopg.Error as exc:
            log.warning("could not publish the writer's facts: %s", first_line(exc))

    def lost(self) -> str | None:
        """The session that holds the lock no longer answers (when it ends, so does the lock)."""
        import psycopg

        if not self.held or self._conn is None:
            return super().lost()
        try:
            with self._guard:
                self._conn.execute("SELECT 1")
            return None
        except psycopg.Error:
            return "its connection to the server ended"

    def _unlock(self) -> None:
        """Unlocked before the session ends: the server drops a closed session's locks only once
        its backend has exited, so a reader asking right after (a `status`, the next writer)
        could still find the lock held."""
        import psycopg

        if self._conn is None:
            return
        keys, args = _lock_key(self.name)
        try:
            if self._locked:
                self._conn.execute(f"SELECT pg_advisory_unlock({keys})", args)
        except psycopg.Error as exc:  # the session is gone: so is its lock
            log.debug("unlock: %s", first_line(exc))
        finally:
            self._locked = False
            self._conn.close()
            self._conn = None


def _holder_row(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT holder FROM {SHARED}.writers WHERE name = %s", (name,)).fetchone()
    return dict(row[0]) if row else {}


@translated(database_error)
def read_holder(url: str, name: str) -> dict[str, Any] | None:
    """Who writes the vault now, or None: a shared try-lock succeeds only when nobody does."""
    with connect(url) as conn:
        if not ensure_shared(conn, create=False):
            return None
        keys, args = _lock_key(name)
        if scalar(conn.execute(f"SELECT pg_try_advisory_lock_shared({keys})", args)):
            conn.execute(f"SELECT pg_advisory_unlock_shared({keys})", args)
            return None
        return _holder_row(conn, name)
