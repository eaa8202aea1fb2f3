"""A vault's own schema in PostgreSQL, for PgStore: its tables as named migration steps, and a
vault opened, created and registered, or migrated by its writer, one process of the database
at a time."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ..errors import IndexNotFound, StoreError
from ..redact import redact
from .pg_connect import (
    LOCK_CLASS,
    MIGRATION_LOCK,
    SHARED,
    connect,
    database_error,
    ensure_shared,
    exists,
    names,
)
from .protocols import translated
from .sql_schema import (
    Migration,
    added_in,
    held_links_step,
    links_step,
    overlap_step,
    script_step,
    window_lines_step,
)
from .sql_tables import SharedTables


def _means_sized(store: SharedTables) -> None:
    """The new mean vectors' column sized for the vault's model, where it has one."""
    dims = store.dims()
    if dims:
        store._reset_vectors(dims)


VAULT_MIGRATIONS = (
    # SQLite's schema 3 in PostgreSQL terms; chunks carry their tsvector and its token count
    # (bm25's document length), fts_totals the vault's row and token counts (its average length),
    # lexemes how many chunks hold each word (its idf: counting them at query time is a scan)
    Migration(
        "tables",
        1,
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE files(
            path TEXT PRIMARY KEY, source TEXT NOT NULL DEFAULT 'memory', hash TEXT NOT NULL,
            mtime BIGINT NOT NULL, size BIGINT NOT NULL, title TEXT, date TEXT, warning TEXT);
        CREATE INDEX files_date ON files(date);
        CREATE TABLE tags(path TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY(tag, path));
        CREATE INDEX tags_path ON tags(path);
        CREATE TABLE chunks(
            id BIGSERIAL PRIMARY KEY, path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory',
            start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, hash TEXT NOT NULL, model TEXT,
            text TEXT NOT NULL, context TEXT NOT NULL DEFAULT '', embedding vector,
            fts tsvector NOT NULL, fts_len INTEGER NOT NULL, updated_at BIGINT NOT NULL);
        CREATE INDEX chunks_path ON chunks(path);
        CREATE INDEX chunks_pending ON chunks(id) WHERE embedding IS NULL;
        CREATE INDEX chunks_fts ON chunks USING gin(fts);
        CREATE TABLE fts_totals(rows BIGINT NOT NULL, tokens BIGINT NOT NULL);
        INSERT INTO fts_totals VALUES (0, 0);
        CREATE TABLE lexemes(lexeme TEXT PRIMARY KEY, chunks INTEGER NOT NULL);
        CREATE TABLE skipped(
            path TEXT PRIMARY KEY, reason TEXT NOT NULL, at BIGINT NOT NULL, mtime BIGINT,
            size BIGINT);
        """,
    ),
    # each note's text as indexed, and when: `get` and `memory_get` read it where the vault's
    # files cannot be read (a teammate's machine, a vault folder that is gone)
    Migration(
        "indexed text",
        2,
        """
        ALTER TABLE files ADD COLUMN text TEXT;
        ALTER TABLE files ADD COLUMN indexed_at DOUBLE PRECISION;
        """,
        adds=("files.text", "files.indexed_at"),
    ),
    # a chunk's vectors are its windows': chunks.embedding holds them end to end (as SQLite's
    # does), chunks.centroid their mean with the HNSW graph (the coarse search); the one-vector
    # column and its graph go, and `index` embeds the chunks again
    Migration(
        "windows",
        3,
        """
        DROP INDEX IF EXISTS chunks_hnsw;
        ALTER TABLE chunks ALTER COLUMN embedding TYPE bytea USING NULL;
        ALTER TABLE chunks ADD COLUMN centroid vector;
        UPDATE chunks SET model = NULL WHERE model IS NOT NULL;
        """,
        then=_means_sized,
    ),
    overlap_step(4),
    window_lines_step(5),
    script_step(6),
    links_step(7),
    held_links_step(8),
)
SCHEMA_VERSION = VAULT_MIGRATIONS[-1].schema


class VaultSchema(SharedTables):
    """A vault's schema: found or made, and brought up to this release's by its writer."""

    MIGRATIONS = VAULT_MIGRATIONS
    SCHEMA_VERSION = SCHEMA_VERSION
    # a vault before the "windows" step holds one `vector` a chunk and no mean vectors: nothing
    # a reader of this release can search
    READABLE_FROM = next(step.schema for step in VAULT_MIGRATIONS if step.name == "windows")
    ADDED_IN = added_in(VAULT_MIGRATIONS)

    url: str
    name: str

    def _open(self, create: bool) -> None:
        """The vault's schema on this connection: a reader's as it is, a writer's created or
        migrated."""
        from psycopg import sql

        conn = self.conn
        registered = ensure_shared(conn, create) and self._registered()
        if not (registered or create):
            found = names(conn)
            raise IndexNotFound(
                f"no vault {self.name!r} in {redact(self.url)}"
                + (f" (it holds {', '.join(found)})" if found else "")
                + f": run memsync index VAULT --db URL --name {self.name}"
            )
        conn.execute(
            sql.SQL("SET search_path TO {}, {}, public").format(
                sql.Identifier(self.name), sql.Identifier(SHARED)
            )
        )
        if not create:
            self._open_schema(writer=False)
        elif not registered or self._schema_version() != SCHEMA_VERSION:
            with self._changing_schemas():  # a vault's schema and registration come at once
                self._create()
                self._open_schema(writer=True)
        else:
            self.schema = SCHEMA_VERSION
        from pgvector.psycopg import register_vector

        register_vector(conn)
        if not create:  # a reader without write rights answers queries but does not refresh
            row = conn.execute("SELECT has_table_privilege('chunks', 'UPDATE')").fetchone()
            self.read_only = not row[0]

    def _registered(self) -> bool:
        row = self.conn.execute(f"SELECT 1 FROM {SHARED}.vaults WHERE name = %s", (self.name,))
        return row.fetchone() is not None

    def _create(self) -> None:
        """The vault's schema and its registration; a schema memsync did not make is refused."""
        from psycopg import sql

        schema = self.conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.name,)
        ).fetchone()
        if schema and not self._registered():
            raise StoreError(
                f"schema {self.name} in {redact(self.url)} is not a memsync vault; it was "
                "left unchanged: choose another --name"
            )
        if not schema:
            self.conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.name)))
            self.conn.execute(
                f"INSERT INTO {SHARED}.vaults(name, created) VALUES(%s, %s)",
                (self.name, time.time()),
            )

    @contextlib.contextmanager
    def _changing_schemas(self) -> Iterator[None]:
        """A transaction in which this process alone of the database's creates or migrates a
        vault."""
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
            yield

    def upgrade(self) -> None:
        with self._changing_schemas():
            super().upgrade()

    def _schema_version(self) -> int:
        from psycopg import sql

        if not exists(self.conn, sql.Identifier(self.name, "meta").as_string(self.conn)):
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0


@translated(database_error)
def schema_size(url: str, name: str) -> int:
    """The bytes the vault's tables take, their indexes and TOAST included."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (name,),
        ).fetchone()
        return int(row[0]) if row else 0


@translated(database_error)
def drop_vault(url: str, name: str) -> None:
    """The vault's schema dropped and its registration removed, in one transaction: only by the
    schema's owner (or a member of its role), and not while a writer holds the vault."""
    from psycopg import sql

    from .pg_lock import AdvisoryLock

    with connect(url) as conn:
        if name not in names(conn):
            raise IndexNotFound(f"no vault {name!r} in {redact(url)}")
        row = conn.execute(
            "SELECT pg_get_userbyid(nspowner), pg_has_role(current_user, nspowner, 'MEMBER') "
            "FROM pg_namespace WHERE nspname = %s",
            (name,),
        ).fetchone()
        if row is not None and not row[1]:
            raise StoreError(
                f"vault {name} in {redact(url)} belongs to the PostgreSQL user {row[0]}: only "
                "they may forget it"
            )
        lock = AdvisoryLock(url, name, "forget")
        lock.advice = "stop it first, then forget the vault"
        with lock, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
            if row is not None:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))
            conn.execute(f"DELETE FROM {SHARED}.vaults WHERE name = %s", (name,))
            conn.execute(f"DELETE FROM {SHARED}.writers WHERE name = %s", (name,))
