"""The embedded backend's SQL: one SQLite file per vault (WAL), FTS5 and sqlite-vec.

apsw ships its own SQLite, so sqlite-vec loads even where Python's sqlite3 cannot load extensions.
Where the extension still cannot load, vectors are searched with numpy over the chunks' mean
vectors (from chunks.embedding) and `vector_backend` says so.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import time
from collections.abc import Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import fts
from ..config import env, make_private_folder
from ..errors import StoreError, os_reason
from ..filters import NoteFilter
from ..vectors import centroid, window_rows
from .protocols import SOURCE, ModelKey, NoteWrite, translating
from .sql_reading import Ranking, SharedReading
from .sql_schema import (
    Migration,
    added_in,
    held_links_step,
    links_step,
    overlap_step,
    script_step,
    window_lines_step,
)

if TYPE_CHECKING:  # numpy is imported where vectors are handled: a no-op sync never needs it
    import numpy as np


def _vectors_as_windows(store: SqliteStore) -> None:
    """chunks_vec made again for the windows' means (the step's SQL emptied the vectors)."""
    if store.vec_version:
        store.conn.execute("DROP TABLE IF EXISTS chunks_vec")
        store._create_vec(store.dims())


CHUNKS_VERSION = "chunks_version"  # meta's key of the "chunks version" step's token

# each step's SQL stands as first released, to the space: SQLite keeps a table's CREATE text and
# rewrites it with each ALTER, so an index made today holds the same text as one migrated
MIGRATIONS = (
    # the reference design's tables, names kept; `context` holds the heading path embedded with
    # the chunk, `skipped` the files the last sync could not index and why
    Migration(
        "tables",
        1,
        """
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE files(
        path TEXT PRIMARY KEY, source TEXT NOT NULL DEFAULT 'memory',
        hash TEXT NOT NULL, mtime INTEGER NOT NULL, size INTEGER NOT NULL);
    CREATE TABLE chunks(
        id INTEGER PRIMARY KEY, path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory',
        start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, hash TEXT NOT NULL, model TEXT,
        text TEXT NOT NULL, context TEXT NOT NULL DEFAULT '', embedding BLOB,
        updated_at INTEGER NOT NULL);
    CREATE INDEX idx_chunks_path ON chunks(path);
    CREATE INDEX idx_chunks_pending ON chunks(id) WHERE embedding IS NULL;
    CREATE TABLE embedding_cache(
        provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,
        hash TEXT NOT NULL, embedding BLOB NOT NULL, dims INTEGER NOT NULL,
        updated_at INTEGER NOT NULL, PRIMARY KEY(provider, model, provider_key, hash));
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, path UNINDEXED, start_line UNINDEXED, end_line UNINDEXED,
        tokenize = 'porter unicode61 remove_diacritics 2');
    CREATE TABLE skipped(path TEXT PRIMARY KEY, reason TEXT NOT NULL, at INTEGER NOT NULL);
    """,
    ),
    # a file skipped for what it holds (too large, binary) is remembered by (mtime, size), like a
    # note, so that it is not read again until it changes; NULL for skips a walk decides
    Migration(
        "skips until changed",
        2,
        """
    ALTER TABLE skipped ADD COLUMN mtime INTEGER;
    ALTER TABLE skipped ADD COLUMN size INTEGER;
    """,
        adds=("skipped.mtime", "skipped.size"),
    ),
    # what a note says about itself, for filters: its title, the date it is about, its tags (a
    # nested tag with its ancestors), and a warning such as malformed front matter
    Migration(
        "note facts",
        3,
        """
    ALTER TABLE files ADD COLUMN title TEXT;
    ALTER TABLE files ADD COLUMN date TEXT;
    ALTER TABLE files ADD COLUMN warning TEXT;
    CREATE INDEX idx_files_date ON files(date);
    CREATE TABLE tags(path TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY(tag, path));
    CREATE INDEX idx_tags_path ON tags(path);
    """,
        adds=("files.title", "files.date", "files.warning", "tags"),
    ),
    # each note's text as indexed, and when: `get` and `memory_get` read it where the vault's
    # files cannot be read (another machine, a vault folder that is gone)
    Migration(
        "indexed text",
        4,
        """
    ALTER TABLE files ADD COLUMN text TEXT;
    ALTER TABLE files ADD COLUMN indexed_at REAL;
    """,
        adds=("files.text", "files.indexed_at"),
    ),
    # a chunk's vectors are its windows' (chunks.embedding holds them end to end; chunks_vec their
    # mean, for the coarse search): the one-vector rows go, and `index` embeds the chunks again
    Migration(
        "windows",
        5,
        "UPDATE chunks SET embedding = NULL, model = NULL",
        then=_vectors_as_windows,
    ),
    overlap_step(6),
    window_lines_step(7),
    script_step(8),
    links_step(9),
    # a token of the chunks' state that every connection reads alike (PRAGMA data_version is each
    # connection's own), drawn anew by the writer in each transaction that changes the chunks or
    # their vectors: a process's long-lived readers then share one copy of what they keep. Every
    # step writes one (_chunks_changed), this one too
    Migration("chunks version", 10, adds=(f"meta.{CHUNKS_VERSION}",)),
    held_links_step(11),
)
# the tables that say a database is a memsync index (and not someone else's file)
OUR_TABLES = frozenset({"meta", "files", "chunks", "embedding_cache", "skipped"})
SCHEMA_VERSION = MIGRATIONS[-1].schema
MAX_K = 4096  # the most neighbours sqlite-vec returns from one query


def _first(cursor: Iterable[tuple]) -> tuple | None:  # type: ignore[type-arg]
    """The first row, with the statement run to its end (apsw cannot COMMIT over a live one)."""
    rows = list(cursor)
    return rows[0] if rows else None


def _glob_range(glob: str) -> tuple[str, str | None]:
    """Pure: the paths a GLOB can match lie in [start, end): its literal start, and that start
    with its last character the next one (UTF-8 keeps the order of characters); None: no end
    short of the last path."""
    start = re.split(r"[*?\[]", glob, maxsplit=1)[0]
    if not start or start[-1] == "\U0010ffff":
        return start, None
    following = ord(start[-1]) + 1
    return start, start[:-1] + chr(0xE000 if 0xD800 <= following <= 0xDFFF else following)


def _one(cursor: Iterable[tuple]) -> tuple:  # type: ignore[type-arg]
    """The only row of a statement that always gives one (a count, a pragma)."""
    row = _first(cursor)
    assert row is not None
    return row


def _now() -> int:
    return int(time.time())


def _vec_extension() -> str:
    """sqlite-vec's loadable file, found without importing the package (which imports numpy,
    which a no-op sync does not need)."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sqlite-vec is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def describe(exc: BaseException, system_errno: int = 0) -> str:
    """What a database error means for the user and what to do, in one line. `system_errno`: the
    connection's last operating system error (SQLite reports a full disk met while growing its
    shared memory file as an I/O error)."""
    import apsw

    if isinstance(exc, apsw.FullError) or system_errno == errno.ENOSPC:
        return "the disk that holds the index is full: free some space, then run this again"
    if isinstance(exc, apsw.ReadOnlyError):
        return "the index is read-only for this user: run writers as the index's owner"
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return "the index file is damaged: delete it and run memsync index VAULT to rebuild it"
    if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
        return "the index stayed locked by another process for 10 s: try again"
    if isinstance(exc, (apsw.IOError, apsw.CantOpenError)):
        return f"the index cannot be read or written ({exc}): check its disk and permissions"
    return f"database error: {exc}"


def database_error(exc: BaseException) -> StoreError | None:
    """A database exception raised after the index was opened, as the StoreError a user reads
    (the index itself stays consistent: SQLite rolled the transaction back); None otherwise."""
    import apsw

    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return StoreError(describe(exc), reopen=True)  # what SQLite rolled back was not the harm
    if isinstance(exc, apsw.Error):
        return StoreError(describe(exc) + " (the index is intact)", reopen=True)
    return None


@translating(database_error)
class SqliteStore(SharedReading):
    """A connection to one index. Writers serialise through SQLite; readers never wait (WAL)."""

    MIGRATIONS = MIGRATIONS
    SCHEMA_VERSION = SCHEMA_VERSION
    ADDED_IN = added_in(MIGRATIONS)

    def __init__(self, path: Path, *, create: bool = True, vectors_in_memory: bool = False) -> None:
        """`vectors_in_memory`: for long-lived callers (an agent, the evaluation) that query many
        times: the vectors stay in RAM (4 bytes x dims per chunk) and KNN is a numpy product, much
        faster than sqlite-vec's scan; a one-shot CLI query does not pay to load them.
        `create=False` (readers): the index must exist, and one this user cannot write is opened
        read-only (`read_only` says so) instead of failing; an older schema is read as it is
        (`create=True` is the writer's, under its lock: it migrates)."""
        import apsw

        self.path = Path(path)
        self.label = f"index {self.path}"
        self.vectors_in_memory = vectors_in_memory
        if not create and not self.path.exists():
            raise StoreError(f"no index at {self.path}")
        try:
            if create:
                make_private_folder(self.path.parent)
            self.conn = self._connect(create)
            self._refuse_foreign()
            if create:  # an index is made WAL once, by its writer; readers find it so
                self._into_wal()
            if not self.read_only:
                self.conn.execute("PRAGMA synchronous=NORMAL")
        except apsw.Error as exc:
            problem = describe(exc, self._system_errno())
            raise StoreError(f"cannot open index {self.path}: {problem}") from exc
        except OSError as exc:
            raise StoreError(f"cannot create index {self.path}: {os_reason(exc)}") from exc
        self.vec_version = self._load_vec()
        opened = os.stat(self.path)
        self._file = (opened.st_dev, opened.st_ino)  # the file, as this process names it
        self._open_schema(writer=create)

    def _system_errno(self) -> int:
        """The operating system error behind the connection's last failure, 0 before it opened."""
        conn = getattr(self, "conn", None)  # unset while the connection itself was failing
        return int(conn.system_errno) if conn is not None else 0

    def _into_wal(self) -> None:
        """WAL mode, retried while a reader has a new index open: SQLite answers BUSY at once to
        a change of journal mode (its busy handler would deadlock there)."""
        import apsw

        deadline = time.monotonic() + 10.0
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                return
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _connect(self, create: bool):  # type: ignore[no-untyped-def]
        """Read-write; for a reader, read-only where this user may not write the file or its folder
        (a WAL index then opens only as immutable: nobody here can be writing it anyway)."""
        import apsw

        self.read_only = False
        name = str(self.path)
        if create or (os.access(name, os.W_OK) and os.access(self.path.parent, os.W_OK)):
            conn = apsw.Connection(name)
            conn.set_busy_timeout(10_000)
            return conn
        self.read_only = True
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        for uri in (f"file:{name}?mode=ro", f"file:{name}?immutable=1"):
            conn = apsw.Connection(uri, flags=flags)
            conn.set_busy_timeout(10_000)
            try:
                _first(conn.execute("SELECT count(*) FROM sqlite_master"))
                return conn
            except (apsw.CantOpenError, apsw.ReadOnlyError):  # WAL without a shared-memory file
                conn.close()
        raise StoreError(f"cannot open index {self.path} read-only")

    def _refuse_foreign(self) -> None:
        """Change nothing in a database that memsync did not make (a wrong --db)."""
        import apsw

        try:
            names = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master")}
        except apsw.NotADBError:
            names = {"(not SQLite)"}
        if names and not names >= OUR_TABLES:
            self.conn.close()
            raise StoreError(
                f"{self.path} is not a memsync index; it was left unchanged: choose another --db"
            )

    # -- connection -------------------------------------------------------------------------

    def _reopened(self) -> SqliteStore:
        return SqliteStore(self.path, create=False)

    def _load_vec(self) -> str | None:
        if env().get("MEMSYNC_DISABLE_VEC"):
            return None
        try:
            self.conn.enable_load_extension(True)
            self.conn.load_extension(_vec_extension())
            self.conn.enable_load_extension(False)
            return str(_one(self.conn.execute("SELECT vec_version()"))[0])
        except Exception:  # any failure means: search vectors with numpy instead
            return None

    @property
    def vector_backend(self) -> str:
        if self.vec_version:
            return f"sqlite-vec {self.vec_version}"
        return "numpy (sqlite-vec extension could not be loaded)"

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT: one file's change lands whole or not at all."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, args))

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    # -- the hooks of the shared policy (sql_tables, sql_reading) ---------------------------

    def _schema_version(self) -> int:
        return int(_one(self.conn.execute("PRAGMA user_version"))[0])

    def _record_schema(self, number: int) -> None:
        self.conn.execute(f"PRAGMA user_version={int(number)}")

    def _reset_vectors(self, dims: int) -> None:
        self.conn.execute("UPDATE chunks SET embedding = NULL, model = NULL")
        self.conn.execute("DROP TABLE IF EXISTS chunks_vec")
        self._create_vec(dims)

    def _insert_chunks(
        self, notes: Sequence[NoteWrite], key: ModelKey | None, cached: dict[str, bytes]
    ) -> None:
        now = _now()
        dims = self.dims() if cached and self._has_vec_table() else None
        for row, chunk in ((note.row, chunk) for note in notes for chunk in note.chunks):
            blob = cached.get(chunk.hash)
            chunk_id = _one(
                self.conn.execute(
                    "INSERT INTO chunks(path, source, start_line, end_line, hash, model, text, "
                    "context, embedding, updated_at, overlap, windows, script) "
                    "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                    (row.path, SOURCE, chunk.start_line, chunk.end_line, chunk.hash,
                     key.model if key and blob else None, chunk.text, chunk.context, blob, now,
                     chunk.overlap, chunk.window_lines, fts.script(chunk.text)),
                )
            )[0]  # fmt: skip
            self.conn.execute(
                "INSERT INTO chunks_fts(rowid, text, path, start_line, end_line) VALUES(?,?,?,?,?)",
                (chunk_id, chunk.fts_text, row.path, chunk.start_line, chunk.end_line),
            )
            if blob is not None and dims:
                self._add_mean(chunk_id, blob, dims)

    def _add_mean(self, chunk_id: int, blob: bytes, dims: int) -> None:
        """A chunk's coarse vector, its windows' mean, into chunks_vec."""
        self.conn.execute(
            "INSERT OR REPLACE INTO chunks_vec(rowid, embedding) VALUES(?, ?)",
            (chunk_id, centroid(blob, dims)),
        )

    def _attach_vectors(self, key: ModelKey, items: Sequence[tuple[int, str, bytes]]) -> int:
        stored = 0
        dims = self.dims() if self._has_vec_table() else None
        for chunk_id, chunk_hash, blob in items:
            self.conn.execute(
                "UPDATE chunks SET embedding = ?, model = ? "
                "WHERE id = ? AND hash = ? AND embedding IS NULL",
                (blob, key.model, chunk_id, chunk_hash),
            )
            if self.conn.changes():
                stored += 1
                if dims:
                    self._add_mean(chunk_id, blob, dims)
        return stored

    def _paths_matching(self, globs: Sequence[str]) -> tuple[str, list[Any]]:
        """Matched against the notes, each glob within the range of paths its literal start
        allows (an index search, not a scan, for `projects/*`); the globs as one JSON list,
        however many (a chain of ORs deeper than 1,000 is an error). x'F5' is past every UTF-8
        path: the end of a glob with no literal start."""
        return (
            "path IN (SELECT f.path FROM json_each(?) AS g CROSS JOIN files AS f "
            "WHERE f.path >= g.value ->> 1 "
            "AND f.path < coalesce(g.value ->> 2, CAST(x'F5' AS TEXT)) "
            "AND f.path GLOB g.value ->> 0)",
            [json.dumps([[glob, *_glob_range(glob)] for glob in globs])],
        )

    def _any_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(list(values))]

    def _rows_of(
        self, select: str, ids: Sequence[int], tail: str = ""
    ) -> Iterable[tuple[Any, ...]]:
        return self._batches(f"{select} WHERE id IN ({{marks}}) {tail}", ids)

    def integrity_check(self) -> str:
        return str(_one(self.conn.execute("PRAGMA integrity_check"))[0])

    # -- meta -------------------------------------------------------------------------------

    def _create_vec(self, dims: int | None) -> None:
        if self.vec_version and dims:
            self.conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING "
                f"vec0(embedding float[{int(dims)}] distance_metric=cosine)"
            )

    def _has_vec_table(self) -> bool:
        if not self.vec_version:
            return False
        row = _first(self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'"))
        return row is not None

    # -- files ------------------------------------------------------------------------------

    def _delete_chunks(self, paths: Sequence[str]) -> None:
        """Note by note: a batch of notes' old chunks could pass SQLite's variable limit."""
        for path in paths:
            ids = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
            if not ids:
                continue
            marks = ",".join("?" * len(ids))
            self.conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", ids)
            if self._has_vec_table():
                self.conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN ({marks})", ids)
            self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", ids)

    def _move_chunks(self, old: str, new: str) -> None:
        super()._move_chunks(old, new)
        # by rowid: chunks_fts's path is UNINDEXED, and `WHERE path = ?` reads every row, for
        # every note of a renamed folder
        self.conn.execute(
            "UPDATE chunks_fts SET path = ? WHERE rowid IN (SELECT id FROM chunks WHERE path = ?)",
            (new, new),
        )

    # -- embeddings -------------------------------------------------------------------------

    def prune_cache(self, older_than_days: float = 30.0) -> None:
        """Forget cached vectors no chunk uses any more, once they are old enough not to be a rename."""
        cutoff = _now() - int(older_than_days * 86400)
        self.conn.execute(
            "DELETE FROM embedding_cache WHERE updated_at < ? "
            "AND hash NOT IN (SELECT hash FROM chunks)",
            (cutoff,),
        )

    # -- reading ----------------------------------------------------------------------------

    def _keyword_ranking(self, terms: Sequence[str], any_term: bool) -> Ranking:
        match = fts.match_expression(list(terms), "OR" if any_term else "AND")

        def ranked(only: NoteFilter, limit: int) -> list[tuple[int, float]]:
            if not only:
                return self._rows(
                    "SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts "
                    "WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
                    (match, limit),
                )
            # `+rowid` keeps the planner from handing the id list to FTS5 as a rowid constraint
            # (a lookup per id, much slower): FTS5 scans its matches, each checked against the list
            allowed, args = self._allowed(only)
            return self._rows(
                "SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                f"AND +rowid IN (SELECT id FROM chunks WHERE {allowed}) ORDER BY rank LIMIT ?",
                (match, *args, limit),
            )

        return ranked

    def _token_chunks(self, tokens: Sequence[str]) -> dict[str, int]:
        """From FTS5's own counts (a vocabulary table of this connection, in its temp schema: a
        reader of a read-only index may make it)."""
        self.conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_vocab "
            "USING fts5vocab(main, chunks_fts, row)"
        )
        found = self._batches(
            "SELECT term, doc FROM temp.chunks_vocab WHERE term IN ({marks})", tokens
        )
        return {str(term): int(doc) for term, doc in found}

    def _nearest_stored(
        self, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """sqlite-vec's KNN over the mean vectors, or numpy's product over them read now."""
        import numpy as np

        if not (self._has_vec_table() and wanted <= MAX_K):
            return self._nearest_of(
                self._read_means(self._index_version()), directions, wanted, only
            )
        allowed, args = self._allowed(only)
        subset = f" AND rowid IN (SELECT id FROM chunks WHERE {allowed})" if only else ""

        def nearest(vector: np.ndarray) -> list[int]:
            found = self.conn.execute(
                f"SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
                f"{subset} ORDER BY distance",
                (np.asarray(vector, dtype="<f4").tobytes(), wanted, *args),
            )
            return [i for i, d in found if d is not None]

        near = dict.fromkeys(i for vector in directions for i in nearest(vector))
        return self._windows(list(near))

    def _index_version(self) -> tuple[int, int]:
        """Changes when any connection has written the index since: this connection's own."""
        return (_one(self.conn.execute("PRAGMA data_version"))[0], self.conn.total_changes())

    def _kept_version(self) -> tuple[Hashable | None, Any]:
        """The file's chunks version, which every connection to it reads alike; an index of an
        older schema has none, and each connection keeps its own copy."""
        found = None
        if self._has(f"meta.{CHUNKS_VERSION}"):
            found = self._rows("SELECT value FROM meta WHERE key = ?", (CHUNKS_VERSION,))
        if not found:
            return None, self._index_version()
        return self._file, found[0][0]

    def _chunks_changed(self) -> None:
        """A random token, not a count: an index made again in the same file (or one whose file
        reuses an inode) must not meet a kept copy's version."""
        self.set_meta(**{CHUNKS_VERSION: secrets.token_hex(8)})

    def _all_means(self) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        dims = self.dims() or 0
        if self._has_vec_table():  # the means are stored: a quarter of the windows' bytes
            rows = self._rows("SELECT rowid, embedding FROM chunks_vec ORDER BY rowid")
            means = [r[1] for r in rows]
        else:
            rows = self._rows(
                "SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY id"
            )
            means = [centroid(r[1], dims) for r in rows]
        return np.array([r[0] for r in rows], dtype=np.int64), window_rows(means, dims)[1]
