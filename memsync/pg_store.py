"""The team backend's SQL: PostgreSQL + pgvector, one schema per vault beside one shared schema.

The shared schema `memsync` holds the vaults' registry, the embedding cache (shared by every
vault of the database: one model, one chunk text, embedded once for the whole team) and who holds
each vault's writer lock. A vault's schema holds what a SQLite index holds: meta, files, tags,
chunks, skipped. Each vault has its own HNSW index, so a query never competes with another
vault's vectors (pgvector 0.6 has no iterative scan: a filtered shared index could return fewer
than k rows).

Keyword search: PostgreSQL has no BM25 and its parsers are not FTS5's, so memsync builds the
tsvector itself from FTS5's own tokens (tokenizer.tokens) and computes FTS5's bm25 in SQL from
each phrase's frequency in a chunk (ts_rank_cd), the words' chunk counts and the vault's token
totals: the same ranks as SQLite, so calibration and --min-score mean the same on both backends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import IndexNotFound, MemsyncError, StoreError
from .filters import NoteFilter
from .lock import WriterLock
from .redact import redact, scrub
from .sql_tables import Tables
from .store import (
    SOURCE,
    ChunkRow,
    FileFacts,
    FileRow,
    ModelKey,
    NewChunk,
    spread_ids,
    translated,
    translating,
)
from .tokenizer import tokens
from .vectors import from_blob

if TYPE_CHECKING:
    import numpy as np
    import psycopg

log = logging.getLogger("memsync.pg")
SHARED = "memsync"
# the HNSW graph and its search list, chosen for recall@10 >= 0.98 against exact search at 100k
# model-like chunks (bench_postgres.py: 0.991 at 15 ms; pgvector's default m 16, ef_construction
# 64 reach 0.975 only at ef_search 1,000, the most it allows)
HNSW_M, HNSW_EF_CONSTRUCTION = 32, 128
EF_SEARCH = 400
HNSW_MAX_DIMS = 2000  # pgvector indexes `vector` up to 2,000 dimensions; above, search is exact
LOCK_CLASS = 0x4D454D53  # 'MEMS': the first key of memsync's advisory locks
MIGRATION_LOCK = 0  # with LOCK_CLASS: serialises schema changes of every vault in the database
K1, B = 1.2, 0.75  # FTS5's bm25 constants
MAX_LEXEME_BYTES = 2000  # tsvector refuses a lexeme of 2 KB or more; a longer token is cut
MAX_POSITIONS = 256  # tsvector keeps 256 positions per lexeme, each at most 16383
MAX_POSITION = 16383

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
]
SCHEMA_VERSION = len(VAULT_MIGRATIONS)


def _first_line(exc: BaseException) -> str:
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
        message = (
            f"this PostgreSQL user may not do that ({_first_line(exc)}): ask for write access "
            "to the vault's schema"
        )
    elif isinstance(exc, psycopg.OperationalError):
        message = f"the PostgreSQL server failed ({_first_line(exc)}): try again"
    elif isinstance(exc, psycopg.Error):
        message = f"PostgreSQL error: {_first_line(exc)} (the index is intact)"
    else:
        return None
    return StoreError(message, reopen=True)


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
    shown = redact(url)
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10, application_name="memsync")
    except psycopg.Error as exc:
        raise StoreError(
            f"cannot connect to {shown} ({_first_line(exc)}): check that the server runs and that "
            "the URL, user and password (PGPASSWORD, ~/.pgpass) are right"
        ) from exc


def _ident(name: str) -> str:
    """A schema name as SQL; locate.checked_name allows only [a-z0-9_-] in it."""
    if not re.fullmatch(r"[a-z0-9_-]+", name):
        raise StoreError(f"{name!r} cannot name a vault schema")
    return f'"{name}"'


def _ensure_shared(conn: psycopg.Connection[Any], create: bool) -> bool:
    """The vector extension and the shared schema, migrated; False when absent and not `create`."""
    if _shared_version(conn) == len(SHARED_MIGRATIONS):
        return True  # the common case: one cheap read, no DDL and no lock
    if not create:
        return _exists(conn, f"{SHARED}.vaults")
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:
            raise StoreError(
                "the pgvector extension is not installed in this database and this user cannot "
                f"install it ({_first_line(exc)}): ask an administrator to run CREATE EXTENSION "
                "vector"
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


def _value(cursor: psycopg.Cursor[Any]) -> Any:
    """The one value of a statement that always gives one row."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def _exists(conn: psycopg.Connection[Any], table: str) -> bool:
    return _value(conn.execute("SELECT to_regclass(%s)", (table,))) is not None


@translated(database_error)
def vault_names(url: str) -> list[str]:
    """The vaults indexed in the database at `url`, by name."""
    with connect(url) as conn:
        return _names(conn)


def _names(conn: psycopg.Connection[Any]) -> list[str]:
    if not _ensure_shared(conn, create=False):
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


def _allowed(only: NoteFilter) -> tuple[str, list[Any]]:
    """The condition on `chunks` that `only` asks for, and its arguments."""
    conditions: list[str] = []
    args: list[Any] = []
    if only.paths:  # matched against the notes, not each of their chunks: 5x fewer rows
        conditions.append("path IN (SELECT path FROM files WHERE path ~ ANY(%s))")
        args.append([_glob_regex(p) for p in only.paths])
    if only.since:
        conditions.append("path IN (SELECT path FROM files WHERE date >= %s)")
        args.append(only.since)
    if only.until:
        conditions.append("path IN (SELECT path FROM files WHERE date <= %s)")
        args.append(only.until)
    for tag in only.tags:
        conditions.append("path IN (SELECT path FROM tags WHERE tag = %s)")
        args.append(tag)
    return " AND ".join(conditions) or "TRUE", args


def _lexeme(token: str) -> str:
    data = token.encode("utf-8")
    if len(data) > MAX_LEXEME_BYTES:
        token = data[:MAX_LEXEME_BYTES].decode("utf-8", "ignore")
    return token


def _quoted(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_of(text: str) -> tuple[str, int, list[str]]:
    """(tsvector literal, token count, distinct lexemes) of an index text: FTS5's tokens with
    their positions."""
    positions: dict[str, list[int]] = {}
    words = tokens(text)
    for offset, token in enumerate(words):
        where = positions.setdefault(_lexeme(token), [])
        if len(where) < MAX_POSITIONS:
            where.append(min(offset + 1, MAX_POSITION))
    literal = " ".join(
        f"{_quoted(lex)}:{','.join(map(str, sorted(set(pos))))}" for lex, pos in positions.items()
    )
    return literal, len(words), list(positions)


def _phrases(terms: Sequence[str]) -> list[list[str]]:
    """Each query term as FTS5 reads a quoted phrase: its tokens, in order."""
    found = [[_lexeme(t) for t in tokens(term)] for term in terms]
    return [p for p in found if p]


def _tsquery(phrase: list[str]) -> str:
    return "(" + " <-> ".join(_quoted(lex) for lex in phrase) + ")"


@dataclass(frozen=True)
class _Bm25:
    """What ranks a query's matches: its phrases as tsqueries, their idfs, the average length."""

    phrases: list[str]
    idfs: list[float]
    average_length: float

    def ceiling(self, i: int) -> float:
        """The most phrase i can add to a chunk's score, whatever its frequency."""
        return self.idfs[i] * (K1 + 1)


def _idf(rows: int, hits: int) -> float:
    """FTS5's idf; a phrase in most chunks still counts a little, as in FTS5."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0 else 1e-6


def _floats(value: Any) -> np.ndarray:
    """A stored vector (pgvector's Vector) as little-endian float32, as SQLite stores it."""
    import numpy as np

    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype="<f4")


@translating(database_error)
class PgStore(Tables):
    """One vault's index in a PostgreSQL database (its own schema); many readers on any machine,
    one writer at a time (AdvisoryLock)."""

    def __init__(self, url: str, name: str, *, create: bool = False) -> None:
        self.url = url
        self.name = name
        self.schema = _ident(name)
        self.shown = f"{redact(url)} (vault {name})"
        self.read_only = False
        self.ef_search = EF_SEARCH
        self.conn = connect(url)
        try:
            self._open(create)
        except BaseException:
            self.conn.close()
            raise
        self._session_ef_search = 0
        self._sample: tuple[tuple[Any, int], np.ndarray] | None = None

    def _open(self, create: bool) -> None:
        conn = self.conn
        registered = _ensure_shared(conn, create) and self._registered()
        if not (registered or create):
            names = _names(conn)
            raise IndexNotFound(
                f"no vault {self.name!r} in {redact(self.url)}"
                + (f" (it holds {', '.join(names)})" if names else "")
                + f": run memsync index VAULT --db URL --name {self.name}"
            )
        conn.execute(f"SET search_path TO {self.schema}, {SHARED}, public")
        if not registered or self._schema_version() != SCHEMA_VERSION:
            with conn.transaction():  # one process at a time creates or migrates a vault
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
                self._create()
                self._migrate()
        from pgvector.psycopg import register_vector

        register_vector(conn)
        if not create:  # a reader without write rights answers queries but does not refresh
            row = conn.execute("SELECT has_table_privilege('chunks', 'UPDATE')").fetchone()
            self.read_only = not row[0]

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql.replace("?", "%s"), args).fetchall()

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    def _registered(self) -> bool:
        row = self.conn.execute(f"SELECT 1 FROM {SHARED}.vaults WHERE name = %s", (self.name,))
        return row.fetchone() is not None

    def _create(self) -> None:
        """The vault's schema and its registration; a schema memsync did not make is refused."""
        exists = self.conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.name,)
        ).fetchone()
        if exists and not self._registered():
            raise StoreError(
                f"schema {self.name} in {redact(self.url)} is not a memsync vault; it was "
                "left unchanged: choose another --name"
            )
        if not exists:
            self.conn.execute(f"CREATE SCHEMA {self.schema}")
            self.conn.execute(
                f"INSERT INTO {SHARED}.vaults(name, created) VALUES(%s, %s)",
                (self.name, time.time()),
            )

    def _schema_version(self) -> int:
        if not _exists(self.conn, f"{self.schema}.meta"):
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        version = self._schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"vault {self.name} has schema {version}, newer than this memsync "
                f"({SCHEMA_VERSION}): upgrade memsync"
            )
        for number in range(version + 1, SCHEMA_VERSION + 1):
            self.conn.execute(VAULT_MIGRATIONS[number - 1])
            self.set_meta(schema_version=number)

    # -- connection -------------------------------------------------------------------------

    @property
    def vector_backend(self) -> str:
        version = self.conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
        dims = self.dims()
        kind = (
            "exact scan"
            if dims and dims > HNSW_MAX_DIMS
            else f"HNSW m {HNSW_M}, ef_search {self.ef_search}"
        )
        return f"pgvector {version[0] if version else '?'} ({kind})"

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    # -- meta -------------------------------------------------------------------------------

    def set_model(self, key: ModelKey, dims: int) -> None:
        """Make `key` the vault's model; a different one drops every vector of this vault (the
        shared cache keeps them for the vaults that use that model)."""
        if self.model_key() == key and self.dims() == dims:
            return
        with self.transaction():
            self.conn.execute("DROP INDEX IF EXISTS chunks_hnsw")
            self.conn.execute(
                f"ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({int(dims)}) USING NULL"
            )
            self.conn.execute("UPDATE chunks SET model = NULL WHERE model IS NOT NULL")
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE provider = %s AND model = %s "
                "AND provider_key = %s AND dims != %s",
                (key.provider, key.model, key.provider_key, dims),
            )
            if dims <= HNSW_MAX_DIMS:
                self.conn.execute(
                    "CREATE INDEX chunks_hnsw ON chunks USING hnsw (embedding vector_cosine_ops) "
                    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
                )
            self.set_meta(
                provider=key.provider, model=key.model, provider_key=key.provider_key, dims=dims
            )

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

    def _delete_chunks(self, path: str) -> None:
        """A note's chunks, and their share of the token totals and the lexemes' chunk counts."""
        self.conn.execute(
            "WITH gone AS (DELETE FROM chunks WHERE path = %s RETURNING fts, fts_len), "
            "totals AS (UPDATE fts_totals SET rows = rows - (SELECT count(*) FROM gone), "
            "tokens = tokens - (SELECT coalesce(sum(fts_len), 0) FROM gone)) "
            "UPDATE lexemes SET chunks = lexemes.chunks - g.n FROM (SELECT lexeme, count(*) AS n "
            "FROM gone, unnest(tsvector_to_array(gone.fts)) AS lexeme GROUP BY lexeme) g "
            "WHERE lexemes.lexeme = g.lexeme",
            (path,),
        )

    def replace_file(
        self, row: FileRow, chunks: Sequence[NewChunk], facts: FileFacts = FileFacts()
    ) -> None:

        key = self.model_key()
        cached = self.cached_embeddings(key, [c.hash for c in chunks]) if key else {}
        now = int(time.time())
        values = []
        tokens = 0
        frequencies: Counter[str] = Counter()
        for chunk in chunks:
            blob = cached.get(chunk.hash)
            vector = from_blob(blob) if blob else None
            literal, length, distinct = tsvector_of(chunk.fts_text)
            tokens += length
            frequencies.update(distinct)
            values.append(
                (
                    row.path, SOURCE, chunk.start_line, chunk.end_line, chunk.hash,
                    key.model if key and blob else None, chunk.text, chunk.context, vector,
                    literal, length, now,
                )
            )  # fmt: skip
        with self.transaction(), self.conn.cursor() as cursor:
            self._delete_chunks(row.path)
            cursor.executemany(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, model, text, "
                "context, embedding, fts, fts_len, updated_at) "
                "VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s::tsvector,%s,%s)",
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
            self._write_file(row, facts)

    # -- embeddings -------------------------------------------------------------------------

    def store_embeddings(
        self, key: ModelKey, items: Sequence[tuple[int, str, bytes]], dims: int
    ) -> int:

        now = int(time.time())
        stored = 0
        with self.transaction(), self.conn.cursor() as cursor:
            if self.model_key() != key:
                return 0  # the model changed under us: these vectors belong to no index
            cursor.executemany(
                "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, "
                "dims, updated_at) VALUES(%s,%s,%s,%s,%s,%s,%s) ON CONFLICT(provider, model, "
                "provider_key, hash) DO UPDATE SET embedding = excluded.embedding, "
                "dims = excluded.dims, updated_at = excluded.updated_at",
                [(key.provider, key.model, key.provider_key, h, blob, dims, now)
                 for _, h, blob in items],
            )  # fmt: skip
            for chunk_id, chunk_hash, blob in items:
                cursor.execute(
                    "UPDATE chunks SET embedding = %s, model = %s "
                    "WHERE id = %s AND hash = %s AND embedding IS NULL",
                    (from_blob(blob), key.model, chunk_id, chunk_hash),
                )
                stored += cursor.rowcount
        return stored

    def prune_cache(self, older_than_days: float = 30.0) -> None:
        """Forget cached vectors that no vault of the database uses any more, once old enough."""
        cutoff = int(time.time() - older_than_days * 86400)
        names = [_ident(n) for (n,) in self.conn.execute(f"SELECT name FROM {SHARED}.vaults")]
        used = " UNION ".join(f"SELECT hash FROM {n}.chunks" for n in names) or "SELECT NULL"
        self.conn.execute(
            f"DELETE FROM embedding_cache WHERE updated_at < %s AND hash NOT IN ({used})",
            (cutoff,),
        )

    # -- reading ----------------------------------------------------------------------------

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self.conn.execute(
            "SELECT id, path, start_line, end_line, text, embedding FROM chunks WHERE id = ANY(%s)",
            (list(ids),),
            binary=True,  # vectors as bytes: parsing their text form costs 100 us each
        )
        return {
            r[0]: ChunkRow(
                r[0], r[1], r[2], r[3], r[4], None if r[5] is None else _floats(r[5]).tobytes()
            )
            for r in rows
        }

    def sample_vectors(self, size: int) -> np.ndarray:
        """Kept between queries while the vault's chunks and vectors stay as they are: 512
        vectors are 0.8 MB to fetch for every query otherwise."""
        import numpy as np

        version = self.conn.execute(
            "SELECT (SELECT rows FROM fts_totals), (SELECT max(id) FROM chunks), "
            "(SELECT count(*) FROM chunks WHERE embedding IS NULL)"
        ).fetchone()
        if self._sample is not None and self._sample[0] == (version, size):
            return self._sample[1]
        low, high = self.conn.execute("SELECT min(id), max(id) FROM chunks").fetchone()
        vectors = []
        if low is not None:
            vectors = [
                _floats(r[0])
                for r in self.conn.execute(
                    "SELECT embedding FROM chunks WHERE id = ANY(%s) AND embedding IS NOT NULL",
                    (spread_ids(low, high, size),),
                    binary=True,
                )
            ]
        sample = np.vstack(vectors) if vectors else np.zeros((0, self.dims() or 0), np.float32)
        self._sample = ((version, size), sample)
        return sample

    def keyword_search(
        self, terms: Sequence[str], any_term: bool, limit: int, only: NoteFilter = NoteFilter()
    ) -> tuple[list[tuple[int, float]], float | None]:
        """FTS5's bm25, in SQL: a phrase's frequency in a chunk is ts_rank_cd with unit weights
        and no normalisation (one cover per occurrence, each worth 1), its idf comes from the
        phrase's document count, the length norm from the vault's token totals. An OR query is
        pruned as MaxScore does: chunks holding only words too common to reach the k-th best
        score are never scored (most chunks hold some common word of a long question)."""
        words = _phrases(terms)
        phrases = [_tsquery(p) for p in words]
        if not phrases:
            return [], None
        rows, tokens = self.conn.execute("SELECT rows, tokens FROM fts_totals").fetchone()
        hits = self._hits(words)
        bm25 = _Bm25(phrases, [_idf(rows, h) for h in hits], tokens / rows if rows else 1.0)
        if any_term:
            found = self._top_any(bm25, hits, limit, only)
            best = self._top_any(bm25, hits, 1) if only and found else found
        else:
            found = self._scored(bm25, " & ".join(phrases), limit, only)
            best = self._scored(bm25, " & ".join(phrases), 1) if only and found else found
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
            else _value(
                self.conn.execute(
                    "SELECT count(*) FROM chunks WHERE fts @@ %s::tsquery", (_tsquery(p),)
                )
            )
            for p in phrases
        ]

    def _top_any(
        self, bm25: _Bm25, hits: Sequence[int], limit: int, only: NoteFilter = NoteFilter()
    ) -> list[tuple[int, float]]:
        """The exact top `limit` of an OR query, scoring as few chunks as MaxScore allows: score
        the chunks holding the rarest phrases first; the k-th score found is a floor that only a
        chunk holding some phrase whose ceilings do not sum below it can pass."""
        order = sorted(range(len(bm25.phrases)), key=lambda i: -bm25.ceiling(i))
        scanned = 0
        while True:  # enough of the rarest phrases that their chunks may fill the top k
            scanned += 1
            if sum(hits[i] for i in order[:scanned]) >= limit or scanned == len(order):
                break
        while True:
            found = self._scored(
                bm25, " | ".join(bm25.phrases[i] for i in order[:scanned]), limit, only
            )
            if scanned == len(order):
                return found
            floor = -found[-1][1] if len(found) == limit else 0.0
            rest = sum(bm25.ceiling(i) for i in order[scanned:])
            if rest < floor:  # a chunk with none of the scanned phrases cannot reach the top k
                return found
            needed = scanned
            while needed < len(order) and sum(bm25.ceiling(i) for i in order[needed:]) >= floor:
                needed += 1
            scanned = max(needed, scanned + 1)

    def _scored(
        self, bm25: _Bm25, match: str, limit: int, only: NoteFilter = NoteFilter()
    ) -> list[tuple[int, float]]:
        """(id, rank) of the best `limit` chunks matching `match` that pass `only`."""
        allowed, args = _allowed(only)
        numbers = range(1, len(bm25.phrases) + 1)
        tfs = ", ".join(f"ts_rank_cd('{{1,1,1,1}}', fts, %s::tsquery, 0) AS tf{i}" for i in numbers)
        score = " + ".join(
            f"{idf!r} * tf{i} * {K1 + 1} / (tf{i} + norm)" for i, idf in zip(numbers, bm25.idfs)
        )
        rows = self.conn.execute(
            f"SELECT id, -({score}) AS rank FROM (SELECT id, {tfs}, "
            f"{K1} * ({1 - B} + {B} * fts_len / %s) AS norm FROM chunks "
            f"WHERE fts @@ %s::tsquery AND {allowed}) scored ORDER BY rank, id LIMIT %s",
            (*bm25.phrases, bm25.average_length, match, *args, limit),
        )
        return [(int(i), float(r)) for i, r in rows]

    def vector_search(
        self, query: np.ndarray, limit: int, only: NoteFilter = NoteFilter()
    ) -> list[tuple[int, float]]:
        """HNSW for a whole-vault search; an exact scan of the allowed chunks for a filtered one
        (HNSW filters after its candidate list, so it could return fewer than k), and where k is
        beyond what ef_search may be."""
        import numpy as np

        vector = np.asarray(query, dtype=np.float32)
        exact = bool(only) or limit > 1000 or (self.dims() or 0) > HNSW_MAX_DIMS
        allowed, args = _allowed(only)
        if exact:
            # OFFSET 0 keeps the planner from folding the subquery into an index scan
            rows = self.conn.execute(
                "SELECT id, distance FROM (SELECT id, embedding <=> %s AS distance FROM chunks "
                f"WHERE embedding IS NOT NULL AND {allowed} OFFSET 0) s "
                "ORDER BY distance, id LIMIT %s",
                (vector, *args, limit),
            )
        else:
            wanted = max(self.ef_search, limit)
            if wanted != self._session_ef_search:
                self.conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(wanted),))
                self._session_ef_search = wanted
            rows = self.conn.execute(
                "SELECT id, embedding <=> %s AS distance FROM chunks "
                "ORDER BY embedding <=> %s LIMIT %s",
                (vector, vector, limit),
            )
        return [(int(i), float(d)) for i, d in rows if d is not None]


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

    def _try(self) -> bool:
        if self._conn is None:
            self._conn = connect(self.url)
            _ensure_shared(self._conn, create=True)
        keys, args = _lock_key(self.name)
        return bool(_value(self._conn.execute(f"SELECT pg_try_advisory_lock({keys})", args)))

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
            log.warning("could not publish the writer's facts: %s", _first_line(exc))

    def alive(self) -> bool:
        """The session that holds the lock still answers (when it ends, so does the lock)."""
        import psycopg

        if not self.held or self._conn is None:
            return False
        try:
            with self._guard:
                self._conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _unlock(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session ends: the server drops its advisory locks
            self._conn = None


def _holder_row(conn: psycopg.Connection[Any], name: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT holder FROM {SHARED}.writers WHERE name = %s", (name,)).fetchone()
    return dict(row[0]) if row else {}


@translated(database_error)
def read_holder(url: str, name: str) -> dict[str, Any] | None:
    """Who writes the vault now, or None: a shared try-lock succeeds only when nobody does."""
    with connect(url) as conn:
        if not _ensure_shared(conn, create=False):
            return None
        keys, args = _lock_key(name)
        if _value(conn.execute(f"SELECT pg_try_advisory_lock_shared({keys})", args)):
            conn.execute(f"SELECT pg_advisory_unlock_shared({keys})", args)
            return None
        return _holder_row(conn, name)
