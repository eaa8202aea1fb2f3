"""PgStore's connection to a PostgreSQL database: opened, its errors said in one line, and the
shared schema `memsync` every vault of the database uses (the vaults' registry, the team's
embedding cache, the writer locks' holders), migrated by its named steps."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import MemsyncError, StoreError
from ..redact import redacted, scrub
from .protocols import translated
from .sql_schema import Migration

if TYPE_CHECKING:
    import psycopg

SHARED = "memsync"
LOCK_CLASS = 0x4D454D53  # 'MEMS': the first key of memsync's advisory locks (pg_lock's too)
MIGRATION_LOCK = 0  # with LOCK_CLASS: serialises schema changes of every vault in the database

SHARED_MIGRATIONS = (
    Migration(
        "registry, cache and writers",
        1,
        """
        CREATE TABLE memsync.vaults(name TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL);
        CREATE TABLE memsync.embedding_cache(
            provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,
            hash TEXT NOT NULL, embedding BYTEA NOT NULL, dims INTEGER NOT NULL,
            updated_at BIGINT NOT NULL, PRIMARY KEY(provider, model, provider_key, hash));
        CREATE TABLE memsync.writers(name TEXT PRIMARY KEY, holder JSONB NOT NULL);
        """,
    ),
)
SHARED_VERSION = SHARED_MIGRATIONS[-1].schema


def first_line(exc: BaseException) -> str:
    return scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def database_error(exc: BaseException) -> StoreError | None:
    """A PostgreSQL error raised after the index was opened, in one line (the transaction was
    rolled back: the index is consistent); None for anything else."""
    try:
        import psycopg
    except ImportError:
        return None
    if isinstance(exc, psycopg.errors.DiskFull):  # before OperationalError, its parent class
        message = "the PostgreSQL server's disk is full (the index is intact)"
    elif isinstance(exc, psycopg.errors.InsufficientPrivilege):
        message = f"this PostgreSQL user may not do that ({first_line(exc)}): {_grant(exc)}"
    elif isinstance(exc, psycopg.OperationalError):
        message = f"the PostgreSQL server failed ({first_line(exc)}): try again"
    elif isinstance(exc, psycopg.Error):
        message = f"PostgreSQL error: {first_line(exc)} (the index is intact)"
    else:
        return None
    return StoreError(message, reopen=True)


def _grant(exc: BaseException) -> str:
    """What to ask the database's owner for: the missing grant where the server names it."""
    schema = re.search(r'permission denied for schema "?([^"\s]+)', str(exc))
    if schema:
        name = schema.group(1)
        return (
            f"ask the database's owner to GRANT USAGE ON SCHEMA {name} (and SELECT ON ALL "
            f"TABLES IN SCHEMA {name}) TO this user"
        )
    table = re.search(r'permission denied for table "?([^"\s]+)', str(exc))
    if table:
        return (
            f"ask the database's owner for the privileges it needs ON {table.group(1)}: GRANT "
            "SELECT to read it, and INSERT, UPDATE, DELETE to write it"
        )
    return "ask for write access to the vault's schema"


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection (every statement sees the latest commit: readers never wait for
    the writer); libpq reads PGPASSWORD, ~/.pgpass and sslmode as usual."""
    try:
        import pgvector.psycopg  # noqa: F401 - checked here: every connection registers it
        import psycopg
    except ImportError as exc:
        raise MemsyncError(
            f"a postgresql:// index needs psycopg and pgvector ({exc.name} is missing): "
            "pip install 'psycopg[binary]>=3.1' 'pgvector>=0.2'"
        ) from exc
    safe = redacted(url)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10, application_name="memsync")
        # as SQLite's WAL with synchronous=NORMAL: a commit does not wait for the disk; a server
        # crash may lose the last moments of writes (the next sync makes them again) but never
        # leaves a half-written note
        conn.execute("SET synchronous_commit = off")
        return conn
    except psycopg.Error as exc:
        # libpq quotes what it read, and where it cut a URL otherwise that may be a password's part
        why = f" ({first_line(exc)})" if safe.certain else ""
        raise StoreError(
            f"cannot connect to {safe.without_secrets}{why}: check that the server runs and that the URL, "
            "user and password (PGPASSWORD, ~/.pgpass) are right"
        ) from exc


def ensure_shared(conn: psycopg.Connection[Any], create: bool) -> bool:
    """The vector extension and the shared schema, migrated; False when absent and not `create`."""
    if _shared_version(conn) == SHARED_VERSION:
        return True  # the common case: one cheap read, no DDL and no lock
    if not create:
        return exists(conn, f"{SHARED}.vaults")
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:
            database = conn.info.dbname
            raise StoreError(
                "the pgvector extension is not installed in this database and this user cannot "
                f"install it ({first_line(exc)}): ask an administrator to run CREATE EXTENSION "
                f'vector; in database "{database}"'
            ) from exc
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SHARED}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {SHARED}.version(part TEXT PRIMARY KEY, number INTEGER)"
        )
        current = _shared_version(conn)
        for step in [step for step in SHARED_MIGRATIONS if step.schema > current]:
            conn.execute(step.sql)
            conn.execute(
                f"INSERT INTO {SHARED}.version VALUES('shared', %s) "
                "ON CONFLICT(part) DO UPDATE SET number = excluded.number",
                (step.schema,),
            )
    return True


def _shared_version(conn: psycopg.Connection[Any]) -> int:
    if not exists(conn, f"{SHARED}.version"):
        return 0
    row = conn.execute(f"SELECT number FROM {SHARED}.version WHERE part = 'shared'").fetchone()
    return int(row[0]) if row else 0


def psycopg_sql(sql: str) -> str:
    """The shared tables' SQL (`?` placeholders) with psycopg's."""
    return sql.replace("?", "%s")


def scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The one value of a statement that always gives one row."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def exists(conn: psycopg.Connection[Any], table: str) -> bool:
    return scalar(conn.execute("SELECT to_regclass(%s)", (table,))) is not None


@translated(database_error)
def vault_names(url: str) -> list[str]:
    """The vaults indexed in the database at `url`, by name."""
    with connect(url) as conn:
        return names(conn)


def names(conn: psycopg.Connection[Any]) -> list[str]:
    if not ensure_shared(conn, create=False):
        return []
    return [r[0] for r in conn.execute(f"SELECT name FROM {SHARED}.vaults ORDER BY name")]
