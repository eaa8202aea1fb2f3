"""The team backend's SQL: PostgreSQL + pgvector, one schema per vault beside one shared schema.

The shared schema `memsync` holds the vaults' registry, the embedding cache (shared by every
vault of the database: one model, one chunk text, embedded once for the whole team) and who holds
each vault's writer lock. A vault's schema holds what a SQLite index holds: meta, files, tags,
chunks, skipped. Each vault has its own HNSW index, so a query never competes with another
vault's vectors (pgvector 0.6 has no iterative scan: a filtered shared index could return fewer
than k rows).

Keyword search: PostgreSQL has no BM25 and its parsers are not FTS5's, so memsync builds the
tsvector itself from FTS5's own tokens (tokenizer.tokens) and computes FTS5's bm25 in SQL from
each phrase's frequency in a chunk (pg_bm25.frequency), the words' chunk counts and the vault's
token totals: the same ranks as SQLite, so calibration and --min-score mean the same on both
backends.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import fts
from .config import EF_SEARCH
from .errors import IndexNotFound, MemsyncError, StoreError
from .filters import NoteFilter
from .pg_bm25 import Bm25, Scorer, phrases_of, top_any, tsquery, tsvector_of
from .redact import redact, redacted, scrub
from .sql_tables import Tables
from .store import (
    SOURCE,
    ChunkRow,
    ModelKey,
    NoteWrite,
    translated,
    translating,
)
from .vectors import (
    KEPT_IN_MEMORY,
    Background,
    MeanVectors,
    centroid,
    fit_in_memory,
    from_blob,
)

if TYPE_CHECKING:
    import numpy as np
    import psycopg

log = logging.getLogger("memsync.pg")
SHARED = "memsync"
# the HNSW graph, chosen for recall@10 >= 0.98 against exact search at 100k model-like chunks
# (bench_postgres.py: 0.991 at 15 ms; pgvector's default m 16, ef_construction 64 reach 0.975
# only at ef_search 1,000, the most it allows); its search list is config.EF_SEARCH
HNSW_M, HNSW_EF_CONSTRUCTION = 32, 128
# the mean vectors' type: half precision where pgvector has it (0.7+; the same recall at 100k
# chunks, a third of the graph's size, a faster graph step), and the most dimensions pgvector's
# HNSW indexes of each; above, search is exact
HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}
# a vault's mean vectors from which an HNSW graph pays: 384-dimension vectors, ef_search 400,
# the nearest 100 on this 2-core machine: 10,000 exact 5.3 ms / graph 7.0 ms (its build 8.6 s),
# 20,000 11.2 / 10.7 ms, 50,000 29.1 / 13.7 ms; below, a vault is scanned exactly, as SQLite's
# sqlite-vec scans it: as fast, every neighbour found, no graph to build or hold in memory
GRAPH_MIN_VECTORS = 20_000
BULK_VECTORS = 1000  # vectors added at once, and most of a vault's, from which the graph is rebuilt
LOCK_CLASS = 0x4D454D53  # 'MEMS': the first key of memsync's advisory locks (pg_lock's too)
MIGRATION_LOCK = 0  # with LOCK_CLASS: serialises schema changes of every vault in the database

SHARED_MIGRATIONS: list[str] = [
    # 1: the registry, the team's embedding cache, the writer locks' holders
    """
    CREATE TABLE memsync.vaults(name TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL);
    CREATE TABLE memsync.embedding_cache(
        provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,
        hash TEXT NOT NULL, embedding BYTEA NOT NULL, dims INTEGER NOT NULL,
        updated_at BIGINT NOT NULL, PRIMARY KEY(provider, model, provider_key, hash));
    CREATE TABLE memsync.writers(name TEXT PRIMARY KEY, holder JSONB NOT NULL);
    """,
]

VAULT_MIGRATIONS: list[str] = [
    # 1: SQLite's schema 3 in PostgreSQL terms; chunks carry their tsvector and its token count
    # (bm25's document length), fts_totals the vault's row and token counts (its average length),
    # lexemes how many chunks hold each word (its idf: counting them at query time is a scan)
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
    # 2: each note's text as indexed, and when: `get` and `memory_get` read it where the vault's
    # files cannot be read (a teammate's machine, a vault folder that is gone)
    """
    ALTER TABLE files ADD COLUMN text TEXT;
    ALTER TABLE files ADD COLUMN indexed_at DOUBLE PRECISION;
    """,
    # 3: a chunk's vectors are its windows': chunks.embedding holds them end to end (as SQLite's
    # does), chunks.centroid their mean with the HNSW graph (the coarse search); the one-vector
    # column and its graph go, and `index` embeds the chunks again (_apply_migration sizes the
    # new column)
    """
    DROP INDEX IF EXISTS chunks_hnsw;
    ALTER TABLE chunks ALTER COLUMN embedding TYPE bytea USING NULL;
    ALTER TABLE chunks ADD COLUMN centroid vector;
    UPDATE chunks SET model = NULL WHERE model IS NOT NULL;
    """,
    # 4: how many of a chunk's first lines repeat the chunk before, which embeds them (a chunk's
    # windows cover its own lines and one line in front: chunking.embed_inputs)
    "ALTER TABLE chunks ADD COLUMN overlap INTEGER NOT NULL DEFAULT 0",
    # 5: the lines of each of a chunk's windows (chunking.Chunk.window_lines), for the lines a query
    # shows; NULL until `index` chunks the notes again (the chunker's rules say `spans`)
    "ALTER TABLE chunks ADD COLUMN windows TEXT",
]
SCHEMA_VERSION = len(VAULT_MIGRATIONS)


def _mean(blob: bytes | None, dims: int) -> np.ndarray | None:
    """A chunk's coarse vector (vectors.centroid of its windows), sent in pgvector's binary
    form (as text, formatting and parsing the floats cost 45 us a vector)."""
    return from_blob(centroid(blob, dims)) if blob else None


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
            "pip install 'memsync[postgres]'"
        ) from exc
    shown = redacted(url)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10, application_name="memsync")
        # as SQLite's WAL with synchronous=NORMAL: a commit does not wait for the disk; a server
        # crash may lose the last moments of writes (the next sync makes them again) but never
        # leaves a half-written note
        conn.execute("SET synchronous_commit = off")
        return conn
    except psycopg.Error as exc:
        # libpq quotes what it read, and where it cut a URL otherwise that may be a password's part
        why = f" ({first_line(exc)})" if shown.certain else ""
        raise StoreError(
            f"cannot connect to {shown.shown}{why}: check that the server runs and that the URL, "
            "user and password (PGPASSWORD, ~/.pgpass) are right"
        ) from exc


def ensure_shared(conn: psycopg.Connection[Any], create: bool) -> bool:
    """The vector extension and the shared schema, migrated; False when absent and not `create`."""
    if _shared_version(conn) == len(SHARED_MIGRATIONS):
        return True  # the common case: one cheap read, no DDL and no lock
    if not create:
        return _exists(conn, f"{SHARED}.vaults")
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
        for number in range(_shared_version(conn) + 1, len(SHARED_MIGRATIONS) + 1):
            conn.execute(SHARED_MIGRATIONS[number - 1])
            conn.execute(
                f"INSERT INTO {SHARED}.version VALUES('shared', %s) "
                "ON CONFLICT(part) DO UPDATE SET number = excluded.number",
                (number,),
            )
    return True


def _shared_version(conn: psycopg.Connection[Any]) -> int:
    if not _exists(conn, f"{SHARED}.version"):
        return 0
    row = conn.execute(f"SELECT number FROM {SHARED}.version WHERE part = 'shared'").fetchone()
    return int(row[0]) if row else 0


def scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The one value of a statement that always gives one row."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    return scalar(conn.execute("SELECT to_regclass(%s)", (table,))) is not None


@translated(database_error)
def vault_names(url: str) -> list[str]:
    """The vaults indexed in the database at `url`, by name."""
    with connect(url) as conn:
        return _names(conn)


def _names(conn: psycopg.Connection[Any]) -> list[str]:
    if not ensure_shared(conn, create=False):
        return []
    return [r[0] for r in conn.execute(f"SELECT name FROM {SHARED}.vaults ORDER BY name")]


def _glob_regex(pattern: str) -> str:
    """SQLite's GLOB (`*`, `?`, `[...]`, `[^...]`, case-sensitive) as an anchored regex."""
    out, i = ["^"], 0
    while i < len(pattern):
        char = pattern[i]
        end = pattern.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif end > 0:
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out) + "$"


def _floats(value: Any) -> np.ndarray:
    """A stored vector (pgvector's Vector) as little-endian float32, as SQLite stores it."""
    import numpy as np

    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype="<f4")


@translating(database_error)
class PgStore(Tables):
    """One vault's index in a PostgreSQL database (its own schema); many readers on any machine,
    one writer at a time (AdvisoryLock)."""

    SCHEMA_VERSION = SCHEMA_VERSION
    # a vault of schema 1 or 2 holds one `vector` a chunk and no mean vectors: nothing a
    # reader of this release can search
    READABLE_FROM = 3
    ADDED_IN = {"chunks.windows": 5}

    def __init__(
        self,
        url: str,
        name: str,
        *,
        create: bool = False,
        ef_search: int = EF_SEARCH,
        vectors_in_memory: bool = False,
    ) -> None:
        """`vectors_in_memory`: for long-lived readers (an agent's server): the mean vectors are
        kept in this process, up to MEMORY_VECTOR_BYTES, and searched exactly by numpy."""
        self.url = url
        self.name = name
        self.shown = f"{redact(url)} (vault {name})"
        self.read_only = False
        self.ef_search = ef_search
        self.vectors_in_memory = vectors_in_memory
        self._means: MeanVectors | None = None
        self._too_many: tuple[Any, ...] | None = None  # the index's state when they were
        self._session_ef_search = 0
        self._iterative: bool | None = None
        self._version: str | None = None  # the server's pgvector, once read
        self._kind: str | None = None  # the mean vectors' type, once read
        self.conn = connect(url)
        try:
            self._open(create)
        except BaseException:
            self.conn.close()
            raise
        self._sample: tuple[tuple[Any, int], Background] | None = None

    def _open(self, create: bool) -> None:
        from psycopg import sql

        conn = self.conn
        registered = ensure_shared(conn, create) and self._registered()
        if not (registered or create):
            names = _names(conn)
            raise IndexNotFound(
                f"no vault {self.name!r} in {redact(self.url)}"
                + (f" (it holds {', '.join(names)})" if names else "")
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

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.conn.execute(sql.replace("?", "%s"), args).fetchall()
        return rows

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    def _registered(self) -> bool:
        row = self.conn.execute(f"SELECT 1 FROM {SHARED}.vaults WHERE name = %s", (self.name,))
        return row.fetchone() is not None

    def _create(self) -> None:
        """The vault's schema and its registration; a schema memsync did not make is refused."""
        from psycopg import sql

        exists = self.conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.name,)
        ).fetchone()
        if exists and not self._registered():
            raise StoreError(
                f"schema {self.name} in {redact(self.url)} is not a memsync vault; it was "
                "left unchanged: choose another --name"
            )
        if not exists:
            self.conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.name)))
            self.conn.execute(
                f"INSERT INTO {SHARED}.vaults(name, created) VALUES(%s, %s)",
                (self.name, time.time()),
            )

    # -- the hooks of the shared policy (sql_tables.Tables) ---------------------------------

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

    def _apply_migration(self, number: int) -> None:
        self.conn.execute(VAULT_MIGRATIONS[number - 1])
        if number == 3 and self.dims():
            self._reset_vectors(self.dims() or 0)

    def _reset_vectors(self, dims: int) -> None:
        """A vault's vectors are of one size, with its own HNSW graph (the shared cache keeps
        other models' vectors for the vaults that use them); the mean vectors are halfvec where
        the server has it (a vault made before is converted by loading_vectors: _halve_means)."""
        self.conn.execute("DROP INDEX IF EXISTS chunks_hnsw")
        kind = "halfvec" if self._pgvector() >= (0, 7) else "vector"
        self.conn.execute(
            f"ALTER TABLE chunks ALTER COLUMN centroid TYPE {kind}({int(dims)}) USING NULL"
        )
        self._kind = kind
        self.conn.execute(
            "UPDATE chunks SET embedding = NULL, model = NULL "
            "WHERE embedding IS NOT NULL OR model IS NOT NULL"
        )
        self._ensure_hnsw(dims)

    def _ensure_hnsw(self, dims: int | None) -> None:
        """The graph, once the vault has GRAPH_MIN_VECTORS mean vectors (counted only while it
        has none: a graph stays when a vault shrinks)."""
        kind, _, graph = self._centroid_column()
        if not dims or dims > HNSW_MAX_DIMS[kind] or graph:
            return
        vectors = scalar(
            self.conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM chunks WHERE centroid IS NOT NULL "
                "LIMIT %s) AS enough",
                (GRAPH_MIN_VECTORS,),
            )
        )
        if vectors >= GRAPH_MIN_VECTORS:
            self.conn.execute(
                "CREATE INDEX IF NOT EXISTS chunks_hnsw ON chunks USING hnsw "
                f"(centroid {kind}_cosine_ops) WITH (m = {HNSW_M}, "
                f"ef_construction = {HNSW_EF_CONSTRUCTION})"
            )

    def _centroid_kind(self) -> str:
        """The mean vectors' type in this vault, `vector` or `halfvec`, read once: writes
        convert to either on assignment (a search reads it afresh: _centroid_column)."""
        if self._kind is None:
            self._kind = self._centroid_column()[0]
        return self._kind

    def _centroid_column(self) -> tuple[str, int, bool]:
        """The mean vectors' type and size as the column holds them now, and whether their
        graph exists (another process may have made the vectors or the graph since): a
        search's operand must match them."""
        row = self.conn.execute(
            "SELECT format_type(atttypid, atttypmod), to_regclass('chunks_hnsw') IS NOT NULL "
            "FROM pg_attribute WHERE attrelid = 'chunks'::regclass AND attname = 'centroid'"
        ).fetchone()
        kind, _, size = (row[0] if row else "vector").partition("(")
        self._kind = "halfvec" if kind == "halfvec" else "vector"
        return self._kind, int(size.rstrip(")") or 0), bool(row and row[1])

    def _pgvector(self) -> tuple[int, ...]:
        """The server's pgvector version as numbers."""
        return tuple(int(p) for p in re.findall(r"\d+", self._extension_version())[:2])

    def _extension_version(self) -> str:
        """The server's pgvector version, read once ("" without the extension)."""
        if self._version is None:
            row = self.conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            self._version = row[0] if row else ""
        return self._version

    def _insert_chunks(
        self, notes: Sequence[NoteWrite], key: ModelKey | None, cached: dict[str, bytes]
    ) -> None:
        """The chunks with their tsvectors, and the vault's word counts and token totals that
        BM25 reads, added up over the notes: one update of each counter row per batch."""
        now = int(time.time())
        dims = (self.dims() or 0) if cached else 0
        values = []
        tokens = 0
        frequencies: Counter[str] = Counter()
        for row, chunk in ((note.row, chunk) for note in notes for chunk in note.chunks):
            blob = cached.get(chunk.hash)
            literal, length, distinct = tsvector_of(chunk.fts_text)
            tokens += length
            frequencies.update(distinct)
            values.append(
                (
                    row.path, SOURCE, chunk.start_line, chunk.end_line, chunk.hash,
                    key.model if key and blob else None, chunk.text, chunk.context,
                    blob, _mean(blob, dims), literal, length,
                    now, chunk.overlap, chunk.window_lines,
                )
            )  # fmt: skip
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, model, text, "
                "context, embedding, centroid, fts, fts_len, updated_at, overlap, windows) "
                f"VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%b::{self._centroid_kind()},%s::tsvector,%s,%s,"
                "%s,%s)",
                values,
            )
            cursor.execute(
                "UPDATE fts_totals SET rows = rows + %s, tokens = tokens + %s",
                (len(values), tokens),
            )
            cursor.execute(
                "INSERT INTO lexemes(lexeme, chunks) SELECT * FROM unnest(%s::text[], %s::int[]) "
                "ON CONFLICT(lexeme) DO UPDATE SET chunks = lexemes.chunks + excluded.chunks",
                (list(frequencies), list(frequencies.values())),
            )

    def _attach_vectors(self, key: ModelKey, items: Sequence[tuple[int, str, bytes]]) -> int:
        """One statement for the batch (a round trip per vector made loads 20x slower)."""
        dims = self.dims() or 0
        with self.conn.cursor() as cursor:
            cursor.execute(
                "UPDATE chunks SET embedding = v.embedding, "
                f"centroid = v.centroid::{self._centroid_kind()}, "
                "model = %s FROM unnest(%s::bigint[], %s::text[], %s::bytea[], %b::vector[]) "
                "AS v(id, hash, embedding, centroid) "
                "WHERE chunks.id = v.id AND chunks.hash = v.hash AND chunks.embedding IS NULL",
                (
                    key.model,
                    [i for i, _, _ in items],
                    [h for _, h, _ in items],
                    [b for _, _, b in items],
                    [_mean(b, dims) for _, _, b in items],
                ),
            )
            return max(int(cursor.rowcount), 0)

    def replace_files(self, notes: Sequence[NoteWrite]) -> None:
        """As every backend does, its statements pipelined: one round trip, not one each."""
        with self.conn.pipeline():
            super().replace_files(notes)

    @contextlib.contextmanager
    def loading_vectors(self, count: int) -> Iterator[None]:
        """Adding most of a vault's vectors at once (a first index): the HNSW graph is built
        after the rows are in, as pgvector advises (much faster than growing it vector by
        vector), with the server's maintenance settings; readers meanwhile scan exactly. The
        graph is made again at the end whatever happened (from GRAPH_MIN_VECTORS vectors),
        and the planner's statistics refreshed."""
        dims = self.dims()
        total = self.counts()["chunks"]
        bulk = bool(dims) and count >= BULK_VECTORS and count * 2 >= total
        halve = bool(dims) and self._centroid_kind() == "vector" and self._pgvector() >= (0, 7)
        if bulk or halve:
            self.conn.execute("DROP INDEX IF EXISTS chunks_hnsw")
        if halve:
            self._halve_means(dims or 0)
        try:
            yield
        finally:
            self._ensure_hnsw(dims)
            if bulk or halve:
                self.conn.execute("ANALYZE chunks")

    def _halve_means(self, dims: int) -> None:
        """A vault made while the server had no halfvec (pgvector < 0.7) keeps its mean vectors
        as `vector`; once the server has it, the writer's next sync converts them in place (no
        re-embedding: the windows, which score the results, stay full precision) and builds the
        graph again over them: a third of its size and a faster graph step at 100k chunks (130
        against 202 MB, 12.3 against 17.1 ms, recall 0.955 against 0.958)."""
        log.info(
            "converting the mean vectors to halfvec(%d) (once; then the graph is rebuilt)", dims
        )
        self.conn.execute(
            f"ALTER TABLE chunks ALTER COLUMN centroid TYPE halfvec({int(dims)}) "
            f"USING centroid::halfvec({int(dims)})"
        )
        self._kind = "halfvec"

    def _paths_matching(self, globs: Sequence[str]) -> tuple[str, list[Any]]:
        """Matched against the notes, not each of their chunks: 5x fewer rows."""
        return "path IN (SELECT path FROM files WHERE path ~ ANY(?))", [
            [_glob_regex(p) for p in globs]
        ]

    def _allowed(self, only: NoteFilter) -> tuple[str, list[Any]]:
        """The condition on `chunks` that `only` asks for (psycopg's placeholders)."""
        conditions, args = self._note_conditions(only)
        return (" AND ".join(conditions) or "TRUE").replace("?", "%s"), args

    def _schema_version(self) -> int:
        from psycopg import sql

        if not _exists(self.conn, sql.Identifier(self.name, "meta").as_string(self.conn)):
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    # -- connection -------------------------------------------------------------------------

    def _reopened(self) -> PgStore:
        return PgStore(self.url, self.name)

    @property
    def vector_backend(self) -> str:
        kind, dims, graph = self._centroid_column()
        if self._keeps_means():
            search = KEPT_IN_MEMORY
        elif graph:
            search = f"HNSW m {HNSW_M}, ef_search {self.ef_search}"
        elif dims > HNSW_MAX_DIMS[kind]:
            search = "exact scan"
        else:
            search = f"exact scan: no graph below {GRAPH_MIN_VECTORS:,} vectors"
        return f"pgvector {self._extension_version() or '?'} ({kind}, {search})"

    def _iterative_scans(self) -> bool:
        """pgvector 0.8+: HNSW scans go on until enough rows pass a filter (strict order), so
        a filtered search may walk the graph; asked once per connection."""
        if self._iterative is None:
            self._iterative = self._pgvector() >= (0, 8)
            if self._iterative:
                self.conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', false)")
        return self._iterative

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    # -- meta -------------------------------------------------------------------------------

    # -- files ------------------------------------------------------------------------------

    def listing(self, folder: str = "") -> list[tuple[str, int, int, int]]:
        under = _glob_regex(f"{folder.rstrip('/')}/*") if folder else ".*"
        return [
            tuple(row)
            for row in self.conn.execute(
                "SELECT f.path, f.size, f.mtime, count(c.id) FROM files f "
                "LEFT JOIN chunks c ON c.path = f.path WHERE f.path ~ %s "
                'GROUP BY f.path ORDER BY f.path COLLATE "C"',
                (under,),
            )
        ]

    def _delete_chunks(self, paths: Sequence[str]) -> None:
        """Notes' chunks, and their share of the token totals and the lexemes' chunk counts."""
        self.conn.execute(
            "WITH gone AS (DELETE FROM chunks WHERE path = ANY(%s) RETURNING fts, fts_len), "
            "totals AS (UPDATE fts_totals SET rows = rows - (SELECT count(*) FROM gone), "
            "tokens = tokens - (SELECT coalesce(sum(fts_len), 0) FROM gone)) "
            "UPDATE lexemes SET chunks = lexemes.chunks - g.n FROM (SELECT lexeme, count(*) AS n "
            "FROM gone, unnest(tsvector_to_array(gone.fts)) AS lexeme GROUP BY lexeme) g "
            "WHERE lexemes.lexeme = g.lexeme",
            (list(paths),),
        )

    # -- embeddings -------------------------------------------------------------------------

    def cached_embeddings(self, key: ModelKey | None, hashes: Sequence[str]) -> dict[str, bytes]:
        """One index probe per hash: the cache is shared by every vault of the database, and
        with `hash IN (...)` the planner read all of a model's rows for each batch (10,000
        rows: 5 ms a batch, growing with the cache; analyzed or not)."""
        if key is None or not hashes:
            return {}
        rows = self._rows(
            "SELECT h.hash, c.embedding FROM unnest(%s::text[]) AS h(hash) CROSS JOIN LATERAL "
            "(SELECT embedding FROM embedding_cache WHERE provider = %s AND model = %s "
            "AND provider_key = %s AND hash = h.hash OFFSET 0) AS c",
            (list(dict.fromkeys(hashes)), key.provider, key.model, key.provider_key),
        )
        return {h: bytes(blob) for h, blob in rows}

    def prune_cache(self, older_than_days: float = 30.0) -> None:
        """Forget cached vectors that no vault of the database uses any more, once old enough."""
        from psycopg import sql

        cutoff = int(time.time() - older_than_days * 86400)
        names = [n for (n,) in self.conn.execute(f"SELECT name FROM {SHARED}.vaults")]
        used = sql.SQL(" UNION ").join(
            sql.SQL("SELECT hash FROM {}").format(sql.Identifier(n, "chunks")) for n in names
        )
        self.conn.execute(
            sql.SQL(
                "DELETE FROM embedding_cache WHERE updated_at < %s AND hash NOT IN ({})"
            ).format(used if names else sql.SQL("SELECT NULL")),
            (cutoff,),
        )

    # -- reading ----------------------------------------------------------------------------

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self.conn.execute(
            "SELECT id, path, start_line, end_line, text, embedding, "
            f"{self._column('chunks.windows')} FROM chunks WHERE id = ANY(%s)",
            (list(ids),),
            binary=True,  # vectors as bytes: parsing their text form costs 100 us each
        )
        return {
            r[0]: ChunkRow(
                r[0], r[1], r[2], r[3], r[4], None if r[5] is None else bytes(r[5]), r[6]
            )
            for r in rows
        }

    def sample_vectors(self, size: int) -> Background:
        """Kept between queries while the vault's chunks and vectors stay as they are: the
        sample's vectors are a few MB to fetch for every query otherwise."""
        version = self._vectors_version()
        if self._sample is not None and self._sample[0] == (version, size):
            return self._sample[1]
        ids = self._sample_ids(size)
        found = []
        if ids:
            found = self.conn.execute(
                f"SELECT embedding, substr(text, 1, {fts.SCRIPT_SAMPLE}), path FROM chunks "
                "WHERE id = ANY(%s) AND embedding IS NOT NULL ORDER BY id",
                (ids,),
            ).fetchall()
        sample = Background.of(
            [(bytes(r[0]), fts.script(r[1]), r[2]) for r in found], self.dims() or 0
        )
        self._sample = ((version, size), sample)
        return sample

    def _vectors_version(self) -> tuple[Any, ...]:
        """Changes when chunks come or go or get their vectors (ids are never reused), and with
        the model, whose change embeds every chunk again under its id; the model comes last."""
        row = self.conn.execute(
            "SELECT (SELECT rows FROM fts_totals), (SELECT max(id) FROM chunks), "
            "(SELECT count(*) FROM chunks WHERE embedding IS NULL), "
            "(SELECT string_agg(value, ' ' ORDER BY key) FROM meta "
            "WHERE key IN ('provider', 'model', 'provider_key', 'dims'))"
        ).fetchone()
        return tuple(row)

    def _mean_vectors(self) -> MeanVectors | None:
        """The mean vectors kept in this process, brought up to date when the index changed (then
        only the new chunks' are read); None for a vault whose vectors would take more than
        MEMORY_VECTOR_BYTES (the graph serves it)."""
        import numpy as np

        version = self._vectors_version()
        if self._means is not None and self._means.version == version:
            return self._means
        if self._too_many == version:
            return None
        ids = np.array(
            [r[0] for r in self.conn.execute(
                "SELECT id FROM chunks WHERE centroid IS NOT NULL ORDER BY id"
            )],
            dtype=np.int64,
        )  # fmt: skip
        dims = self.dims() or 0
        if not fit_in_memory(len(ids), dims):
            self._means, self._too_many = None, version
            return None
        kind = self._centroid_column()[0]
        value = np.dtype(">f2" if kind == "halfvec" else ">f4")
        kept = self._means  # under another model, every chunk was embedded again
        same_model = kept is not None and kept.version[-1] == version[-1]
        known = kept if kept is not None and same_model else MeanVectors.empty(dims)
        select = f"SELECT id, {kind}_send(centroid) FROM chunks WHERE centroid IS NOT NULL"

        def fetch(new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # pgvector's own binary form (a 4-byte header, then big-endian floats) joined into
            # one buffer: no object per vector (100k vectors: 1.1 s, a third of reading objects);
            # the first time every row, then the new ones by id
            with self.conn.cursor(binary=True) as cursor:
                if len(known.ids):
                    cursor.execute(f"{select} AND id = ANY(%s) ORDER BY id", (new.tolist(),))
                else:
                    cursor.execute(f"{select} ORDER BY id")
                rows = cursor.fetchall()
            packed = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint8)
            floats = packed.reshape(len(rows), 4 + dims * value.itemsize)[:, 4:].copy()
            matrix = floats.view(value).astype(np.float32).reshape(len(rows), dims)
            return np.array([r[0] for r in rows], dtype=np.int64), matrix

        self._means = known.updated(version, ids, fetch)
        return self._means

    def keyword_search(
        self, terms: Sequence[str], any_term: bool, limit: int, only: NoteFilter = NoteFilter()
    ) -> tuple[list[tuple[int, float]], float | None]:
        """FTS5's bm25, in SQL (pg_bm25): an AND query scored at once; an OR query pruned as
        MaxScore does, so that chunks holding only common words are never scored."""
        words = phrases_of(terms)
        if not words:
            return [], None
        rows, tokens = self.conn.execute("SELECT rows, tokens FROM fts_totals").fetchone()
        hits = self._hits(words)
        bm25 = Bm25.of(words, hits, rows, tokens)

        def scorer(where: NoteFilter) -> Scorer:
            allowed, allowed_args = self._allowed(where)

            def scored(match: str, k: int) -> list[tuple[int, float]]:
                sql, args = bm25.select(match, allowed, allowed_args)
                return [(int(i), float(r)) for i, r in self.conn.execute(sql, (*args, k))]

            return scored

        everywhere = NoteFilter()  # the best rank in the whole vault calibrates a filtered query
        if any_term:
            found = top_any(bm25, hits, limit, scorer(only))
            best = top_any(bm25, hits, 1, scorer(everywhere)) if only and found else found
        else:
            found = scorer(only)(bm25.all_of(), limit)
            best = scorer(everywhere)(bm25.all_of(), 1) if only and found else found
        return found, best[0][1] if best else None

    def _hits(self, phrases: list[list[str]]) -> list[int]:
        """How many chunks hold each phrase: a word's count is kept up to date by every write; a
        phrase of several words is counted (its rarest word keeps that cheap)."""
        words = [p[0] for p in phrases if len(p) == 1]
        counted = dict(
            self.conn.execute(
                "SELECT lexeme, chunks FROM lexemes WHERE lexeme = ANY(%s)", (words,)
            ).fetchall()
        )
        return [
            counted.get(p[0], 0)
            if len(p) == 1
            else scalar(
                self.conn.execute(
                    "SELECT count(*) FROM chunks WHERE fts @@ %s::tsquery", (tsquery(p),)
                )
            )
            for p in phrases
        ]

    def _nearest_windows(
        self, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """A long-lived reader takes the first step in its memory (_mean_vectors); others walk
        the HNSW graph (a vault below GRAPH_MIN_VECTORS has none and is scanned exactly); for a
        filtered search only where pgvector (0.8+) scans it iteratively until enough allowed
        chunks pass, and an exact scan of the allowed chunks otherwise or when the graph yields
        fewer (a filter that allows few: HNSW filters after its candidate list); exact too where
        k is beyond what ef_search may be."""
        import numpy as np

        allowed, args = self._allowed(only)
        means = self._mean_vectors() if self.vectors_in_memory else None
        if means is not None:
            permitted = None
            if only:
                found = self.conn.execute(f"SELECT id FROM chunks WHERE {allowed}", args)
                permitted = np.array([r[0] for r in found.fetchall()], dtype=np.int64)
            near = dict.fromkeys(i for d in directions for i in means.nearest(d, wanted, permitted))
            rows = self.conn.execute(
                "SELECT id, embedding FROM chunks WHERE id = ANY(%s)", (list(near),), binary=True
            ).fetchall()
        else:
            rows = list(
                {
                    row[0]: row
                    for d in directions
                    for row in self._nearest_on_server(d, wanted, only, allowed, args)
                }.values()
            )
        return ((int(i), bytes(b)) for i, b in rows if b is not None)

    def _nearest_on_server(
        self, vector: np.ndarray, wanted: int, only: NoteFilter, allowed: str, args: list[Any]
    ) -> list[tuple[Any, ...]]:
        """(id, windows) of the `wanted` chunks whose mean is nearest: through the graph where
        it serves, else an exact scan. Rows in binary form: the windows' hex text took 3 ms of a
        query to send and decode (0.9 ms as bytes)."""
        kind, dims, graph = self._centroid_column()
        graph = graph and wanted <= 1000 and dims <= HNSW_MAX_DIMS[kind]
        rows: list[tuple[Any, ...]] | None = None
        if graph and (not only or self._iterative_scans()):
            if max(self.ef_search, wanted) != self._session_ef_search:
                self._session_ef_search = max(self.ef_search, wanted)
                self.conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, false)",
                    (str(self._session_ef_search),),
                )
            rows = self.conn.execute(
                f"SELECT id, embedding FROM chunks WHERE centroid IS NOT NULL AND {allowed} "
                f"ORDER BY centroid <=> %s::{kind} LIMIT %s",
                (*args, vector, wanted),
                binary=True,
            ).fetchall()
            rows = rows if len(rows) == wanted else None  # the graph gave too few: scan
        if rows is None:
            # OFFSET 0 keeps the planner from folding the subquery into an index scan
            rows = self.conn.execute(
                f"SELECT id, embedding FROM (SELECT id, embedding, centroid <=> %s::{kind} AS distance "
                f"FROM chunks WHERE centroid IS NOT NULL AND {allowed} OFFSET 0) s "
                "ORDER BY distance, id LIMIT %s",
                (vector, *args, wanted),
                binary=True,
            ).fetchall()
        return rows
