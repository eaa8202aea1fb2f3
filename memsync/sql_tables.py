"""The policy both backends share, and the SQL they run alike: the tables every index has, in
SQL that SQLite and PostgreSQL read the same way (`?` placeholders, which PgStore turns into
psycopg's), the schema's named steps, a long-lived reader's kept mean vectors and calibration
sample. Each engine supplies small hooks (its vector storage, its chunk rows, its keyword
ranking, its schema's record); each engine's own tables stay in sqlite_store and pg_store."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import fts
from .errors import StoreError
from .filters import NoteFilter
from .origin import Origin
from .store import (
    SOURCE,
    ChunkRow,
    FileFacts,
    FileRow,
    ModelKey,
    NewChunk,
    NoteWrite,
    PendingChunk,
    SkipRow,
    spread_ids,
)
from .vectors import Background, MeanVectors, coarse_pool, fit_in_memory, rescored, unit_rows

if TYPE_CHECKING:
    import numpy as np

BATCH = 500  # ids or paths per `IN (...)`: well under either engine's limit on parameters


def _marks(count: int) -> str:
    return ",".join("?" * count)


T = TypeVar("T", bound="SharedTables")
# a keyword ranking of one query: (the notes it may find, how many) -> (chunk id, bm25 rank)
Ranking = Callable[[NoteFilter, int], list[tuple[int, float]]]


@dataclass(frozen=True)
class Migration:
    """One named step of an index's schema. `schema` is the number an index records once the
    step is applied (its schema_version): numbers stay as released, so an index never takes a
    step twice."""

    name: str
    schema: int
    sql: str = ""  # its statements, run at once
    adds: tuple[str, ...] = ()  # what readers read that it adds ("table" or "table.column")
    then: Callable[[Any], None] | None = None  # with the store, after its SQL: what SQL cannot say


def overlap_step(schema: int) -> Migration:
    """How many of a chunk's first lines repeat the chunk before, which embeds them (a chunk's
    windows cover its own lines and one line in front: chunking.embed_inputs)."""
    sql = "ALTER TABLE chunks ADD COLUMN overlap INTEGER NOT NULL DEFAULT 0"
    return Migration("overlap", schema, sql)


def window_lines_step(schema: int) -> Migration:
    """The lines of each of a chunk's windows (chunking.Chunk.window_lines), for the lines a
    query shows; NULL until `index` chunks the notes again (the chunker's rules say `spans`)."""
    sql = "ALTER TABLE chunks ADD COLUMN windows TEXT"
    return Migration("window lines", schema, sql, adds=("chunks.windows",))


def added_in(steps: Sequence[Migration]) -> dict[str, int]:
    """What each step added that readers read: the schema from which an index holds it."""
    return {name: step.schema for step in steps for name in step.adds}


class SharedTables:
    """meta, files, tags, skipped and the embedding cache, over `_rows` and `_run_many`."""

    conn: Any  # the engine's connection

    MIGRATIONS: Sequence[Migration] = ()  # the engine's schema, step by step
    SCHEMA_VERSION: int = 0  # the engine's newest schema
    READABLE_FROM: int = 1  # the oldest schema a reader answers from as it is
    # what a later schema added that readers read ("table" or "table.column"): the schema that did
    ADDED_IN: dict[str, int] = {}
    schema: int = 0  # the index's schema as opened: a reader may answer from an older one
    read_only: bool = False
    shown: str = "the index"  # in messages: "index /path", "vault notes"
    vectors_in_memory: bool = False  # a long-lived reader's: it keeps the mean vectors

    _companion: Any = None  # beside()'s connection, once opened
    _means: MeanVectors | None = None  # a long-lived reader's mean vectors
    _too_many: Any = None  # the index's version when its mean vectors did not fit in memory
    _sample: tuple[Any, Background] | None = None  # a long-lived reader's calibration sample

    def close(self) -> None:
        if self._companion is not None:
            self._companion.close()
            self._companion = None
        self.conn.close()

    def beside(self: T) -> T:
        """A second connection to this index, opened once and kept: the keyword leg runs on it
        while this one searches the vectors (a connection answers one statement at a time)."""
        if self._companion is None:
            self._companion = self._reopened()
        companion: T = self._companion
        return companion

    def _reopened(self: T) -> T:
        """Another reader of the same index."""
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _delete_chunks(self, paths: Sequence[str]) -> None:
        """The chunks of these notes, with everything kept beside them."""
        raise NotImplementedError

    def _move_chunks(self, old: str, new: str) -> None:
        """A renamed note's chunks under its new path (an engine moves what it keeps beside them)."""
        self._run_many("UPDATE chunks SET path = ? WHERE path = ?", [(new, old)])

    # the engine's hooks under the shared policy below

    def _schema_version(self) -> int:
        raise NotImplementedError

    def _record_schema(self, number: int) -> None:
        """Where the engine keeps the schema number besides meta's schema_version."""

    def _reset_vectors(self, dims: int) -> None:
        """Every chunk without a vector, and the vector storage made for `dims`."""
        raise NotImplementedError

    def _insert_chunks(
        self, notes: Sequence[NoteWrite], key: ModelKey | None, cached: dict[str, bytes]
    ) -> None:
        """The notes' chunks, with the cached vectors they can reuse, in replace_files'
        transaction."""
        raise NotImplementedError

    def _attach_vectors(self, key: ModelKey, items: Sequence[tuple[int, str, bytes]]) -> int:
        """Vectors onto the chunks that still have that hash and none yet; how many did."""
        raise NotImplementedError

    def _paths_matching(self, globs: Sequence[str]) -> tuple[str, list[Any]]:
        """A condition on `path` true for any of the globs (SQLite's GLOB semantics)."""
        raise NotImplementedError

    def _rows_of(
        self, select: str, ids: Sequence[int], tail: str = ""
    ) -> Iterable[tuple[Any, ...]]:
        """`select` (up to its FROM) for the chunks `ids`, `tail` after their condition."""
        raise NotImplementedError

    def _keyword_ranking(self, terms: Sequence[str], any_term: bool) -> Ranking:
        """How the engine ranks chunks by FTS5's bm25 for these terms (every one, or any)."""
        raise NotImplementedError

    def _index_version(self) -> Any:
        """Changes whenever the index's chunks or their vectors may have changed."""
        raise NotImplementedError

    def _all_means(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) of every chunk's mean vector, by id."""
        raise NotImplementedError

    def _updated_means(self, kept: MeanVectors, version: Any) -> MeanVectors | None:
        """`kept` brought to `version` by reading only what changed; None where the engine
        cannot (SQLite may give a new chunk the id of a deleted one: all are read again)."""
        return None

    def _nearest_stored(
        self, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """_nearest_windows by the engine's own search, where no mean vectors are kept."""
        raise NotImplementedError

    # -- schema ---------------------------------------------------------------------------

    def _open_schema(self, writer: bool) -> None:
        """A writer (it holds the writer lock: index, watch) brings the index to this release's
        schema; a reader never changes it: it answers from an older schema as it is, or refuses
        one it cannot read, naming who must upgrade it. A newer schema is refused."""
        self.schema = self._schema_version()
        if self.schema > self.SCHEMA_VERSION:
            raise StoreError(
                f"{self.shown} has schema {self.schema}, newer than this memsync "
                f"({self.SCHEMA_VERSION}): upgrade memsync"
            )
        if writer:
            self.upgrade()
        elif self.schema == 0:
            raise StoreError(f"{self.shown} is still being created: try again in a moment")
        elif self.schema < self.READABLE_FROM:
            raise StoreError(
                f"{self.shown} has schema {self.schema}, older than this memsync reads: "
                f"{self._upgrader()} must run this release's memsync index or watch first"
            )

    def upgrade(self) -> None:
        """The schema's steps up to this release's, each in its own transaction; only a
        writer holding the writer lock calls this, and one this user cannot write is refused."""
        if self._schema_version() < self.SCHEMA_VERSION and self.read_only:
            raise StoreError(
                f"{self.shown} needs an upgrade that this user cannot write: run memsync "
                "index as its owner"
            )
        current = self._schema_version()
        for step in [s for s in self.MIGRATIONS if current < s.schema <= self.SCHEMA_VERSION]:
            with self.transaction():
                if self._schema_version() >= step.schema:
                    continue  # another writer (a query's refresh, index) applied it meanwhile
                self._migrate(step)
        self.schema = self.SCHEMA_VERSION

    def _migrate(self, step: Migration) -> None:
        """One step and its record, inside upgrade's transaction."""
        if step.sql:
            self.conn.execute(step.sql)
        if step.then is not None:
            step.then(self)
        self._record_schema(step.schema)
        self.set_meta(schema_version=step.schema)

    @property
    def behind(self) -> str:
        """"" for an index of this release's schema; else what a reader of an older one says
        (read again: a writer may have upgraded it since)."""
        if self.schema < self.SCHEMA_VERSION:
            self.schema = self._schema_version()
        if self.schema >= self.SCHEMA_VERSION:
            return ""
        return (
            f"{self.shown} is behind an older memsync's rules (schema {self.schema}, this "
            f"release's is {self.SCHEMA_VERSION}): answers come from it as it is, not refreshed; "
            f"{self._upgrader()} brings it up to date with this release's memsync index or watch"
        )

    def _upgrader(self) -> str:
        """Who may upgrade the index: its vault's writer, on the host it records, else of its
        folder."""
        origin = Origin.of(self.meta())
        if origin.host:
            return f"the vault's writer on host {origin.host}"
        return f"the writer of {origin.path}" if origin.path else "its writer"

    def _has(self, name: str) -> bool:
        """Whether the index holds a table or `table.column` that a later schema added."""
        return self.schema >= self.ADDED_IN.get(name, 1)

    def _column(self, name: str) -> str:
        """`table.column`'s column, or NULL in an older index without it: what a writer's
        migration would hold there until `index` fills it."""
        return name.partition(".")[2] if self._has(name) else "NULL"

    def _tags(self) -> str:
        """The tags table, or none in an older index without it."""
        return "tags" if self._has("tags") else "(SELECT NULL AS path, NULL AS tag WHERE 1 = 0)"

    def _batches(self, sql: str, values: Sequence[Any], *args: Any) -> Iterator[tuple[Any, ...]]:
        """`sql` with its `({in})` filled for BATCH values at a time; `args` come first."""
        unique = list(dict.fromkeys(values))
        for start in range(0, len(unique), BATCH):
            part = unique[start : start + BATCH]
            yield from self._rows(sql.format(marks=_marks(len(part))), [*args, *part])

    # -- meta -------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return dict(self._rows("SELECT key, value FROM meta"))

    def set_meta(self, **values: str | float) -> None:
        self._run_many(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(k, str(v)) for k, v in values.items()],
        )

    def record(self, **facts: str | float) -> None:
        """Facts about the index (its vault, its rules, the last sync), in one small transaction."""
        with self.transaction():
            self.set_meta(**facts)

    def mark_synced(self, **facts: str) -> None:
        """Record that the index was just compared with the vault."""
        self.record(last_sync=time.time(), **facts)

    def model_key(self) -> ModelKey | None:
        meta = self.meta()
        if "model" not in meta:
            return None
        return ModelKey(meta["provider"], meta["model"], meta.get("provider_key", ""))

    def dims(self) -> int | None:
        value = self.meta().get("dims")
        return int(value) if value else None

    def set_model(self, key: ModelKey, dims: int) -> None:
        """Make `key` the index's model: another model or size drops every vector (an index never
        mixes two), and the cached vectors of the same name at another size are stale."""
        if self.model_key() == key and self.dims() == dims:
            return
        with self.transaction():
            self._reset_vectors(dims)
            self._run_many(
                "DELETE FROM embedding_cache WHERE provider = ? AND model = ? "
                "AND provider_key = ? AND dims != ?",
                [(key.provider, key.model, key.provider_key, dims)],
            )
            self.set_meta(
                provider=key.provider, model=key.model, provider_key=key.provider_key, dims=dims
            )

    # -- files ------------------------------------------------------------------------------

    def file_rows(self) -> dict[str, FileRow]:
        return {
            row[0]: FileRow(*row) for row in self._rows("SELECT path, hash, mtime, size FROM files")
        }

    def file_stats(self) -> dict[str, tuple[int, int]]:
        """path -> (mtime_ns, size) of every indexed note: what a stat-only sync compares (half
        the cost of file_rows at 20k notes: no hashes, no row objects)."""
        return {
            row[0]: (row[1], row[2]) for row in self._rows("SELECT path, mtime, size FROM files")
        }

    def file_hashes(self, paths: Sequence[str]) -> dict[str, str]:
        return dict(self._batches("SELECT path, hash FROM files WHERE path IN ({marks})", paths))

    def touch_file(self, row: FileRow, day: str | None = None) -> None:
        """Same bytes, new mtime (and so, for a note dated by it, a new date)."""
        self._run_many(
            "UPDATE files SET mtime = ?, size = ?, date = coalesce(?, date) WHERE path = ?",
            [(row.mtime_ns, row.size, day, row.path)],
        )

    def listing(self, folder: str = "") -> list[tuple[str, int, int, int]]:
        """(path, size, mtime_ns, chunks) of every indexed note below `folder`, in code-point
        order on both engines (PostgreSQL would sort by locale)."""
        where, args = self._paths_matching([f"{folder.rstrip('/')}/*"]) if folder else ("TRUE", [])
        return sorted(
            self._rows(
                "SELECT f.path, f.size, f.mtime, count(c.id) FROM (SELECT path, size, mtime "
                f"FROM files WHERE {where}) AS f LEFT JOIN chunks AS c ON c.path = f.path "
                "GROUP BY f.path, f.size, f.mtime",
                args,
            )
        )

    def indexed_text(self, path: str) -> tuple[str, float] | None:
        """A note's text as it was indexed, and when: where the vault's files cannot be read."""
        text, when = self._column("files.text"), self._column("files.indexed_at")
        rows = self._rows(
            f"SELECT {text}, {when} FROM files WHERE path = ? AND {text} IS NOT NULL", (path,)
        )
        return (str(rows[0][0]), float(rows[0][1] or 0.0)) if rows else None

    def file_warnings(self) -> list[tuple[str, str]]:
        """By path, in code-point order on both engines (PostgreSQL would sort by locale)."""
        warning = self._column("files.warning")
        return sorted(self._rows(f"SELECT path, {warning} FROM files WHERE {warning} IS NOT NULL"))

    def move_file(self, old: str, row: FileRow, day: str) -> None:
        """A rename: same bytes under a new path; chunks and vectors stay as they are, the date
        is the new path's (a daily note moved in or out of daily/)."""
        new = row.path
        with self.transaction():
            self._run_many("DELETE FROM files WHERE path = ?", [(new,)])
            self._delete_chunks([new])
            self._run_many(
                "UPDATE files SET path = ?, mtime = ?, size = ?, date = ? WHERE path = ?",
                [(new, row.mtime_ns, row.size, day, old)],
            )
            self._move_chunks(old, new)
            self._run_many("DELETE FROM tags WHERE path = ?", [(new,)])
            self._run_many("UPDATE tags SET path = ? WHERE path = ?", [(new, old)])
            self._run_many("DELETE FROM skipped WHERE path IN (?, ?)", [(old, new)])

    def replace_file(
        self, row: FileRow, chunks: Sequence[NewChunk], facts: FileFacts = FileFacts()
    ) -> None:
        """One note's new chunks, files row and tags (replace_files of one)."""
        self.replace_files([NoteWrite(row, chunks, facts)])

    def replace_files(self, notes: Sequence[NoteWrite]) -> None:
        """Notes' new chunks (reusing cached vectors of chunks seen before), files rows and
        tags, in one transaction: a sync writes its notes a batch at a time (on PostgreSQL a
        transaction per note was most of a first index's time)."""
        if not notes:
            return
        key = self.model_key()
        hashes = [c.hash for note in notes for c in note.chunks]
        cached = self.cached_embeddings(key, hashes) if key else {}
        with self.transaction():
            self._delete_chunks([note.row.path for note in notes])
            self._insert_chunks(notes, key, cached)
            self._write_files(notes)

    def remove_file(self, path: str, skip: SkipRow | None = None) -> None:
        """A note gone from the index: deleted, or now skipped for the reason `skip` gives."""
        with self.transaction():
            self._delete_chunks([path])
            self._run_many("DELETE FROM files WHERE path = ?", [(path,)])
            self._run_many("DELETE FROM tags WHERE path = ?", [(path,)])
            if skip is not None:
                self._insert_skips([skip])

    def _write_files(self, notes: Sequence[NoteWrite]) -> None:
        """The notes' files rows and tags, inside replace_files' transaction; their skips are
        forgotten: they are indexed now."""
        now = time.time()
        self._run_many(
            "INSERT INTO files(path, source, hash, mtime, size, title, date, warning, text, "
            "indexed_at) VALUES(?,?,?,?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
            "hash = excluded.hash, mtime = excluded.mtime, size = excluded.size, "
            "title = excluded.title, date = excluded.date, warning = excluded.warning, "
            "text = excluded.text, indexed_at = excluded.indexed_at",
            [(row.path, SOURCE, row.hash, row.mtime_ns, row.size, facts.title, facts.date,
              facts.warning, facts.text, now) for row, _, facts in notes],
        )  # fmt: skip
        paths = [(note.row.path,) for note in notes]
        self._run_many("DELETE FROM tags WHERE path = ?", paths)
        self._run_many(
            "INSERT INTO tags(path, tag) VALUES(?, ?) ON CONFLICT DO NOTHING",
            [(row.path, tag) for row, _, facts in notes for tag in facts.tags],
        )
        self._run_many("DELETE FROM skipped WHERE path = ?", paths)

    # -- skipped files ----------------------------------------------------------------------

    def _insert_skips(self, skips: Iterable[SkipRow]) -> None:
        now = int(time.time())
        self._run_many(
            "INSERT INTO skipped(path, reason, at, mtime, size) VALUES(?,?,?,?,?) "
            "ON CONFLICT(path) DO UPDATE SET reason = excluded.reason, at = excluded.at, "
            "mtime = excluded.mtime, size = excluded.size",
            [(s.path, s.reason, now, s.mtime_ns, s.size) for s in skips],
        )

    def update_skips(
        self, add: Iterable[SkipRow] = (), drop: Iterable[str] = (), *, replace_all: bool = False
    ) -> None:
        """Skips found by a walk or an event; a full walk replaces the whole list."""
        with self.transaction():
            if replace_all:
                self._run_many("DELETE FROM skipped", [()])
            self._run_many("DELETE FROM skipped WHERE path = ?", [(p,) for p in drop])
            self._insert_skips(add)

    def skip_rows(self) -> dict[str, SkipRow]:
        return {
            row[0]: SkipRow(*row)
            for row in self._rows(
                f"SELECT path, reason, {self._column('skipped.mtime')}, "
                f"{self._column('skipped.size')} FROM skipped"
            )
        }

    def skipped(self) -> list[tuple[str, str]]:
        return sorted(self._rows("SELECT path, reason FROM skipped"))

    # -- embeddings -------------------------------------------------------------------------

    def pending_chunks(self, limit: int, any_chunk: bool = False) -> list[PendingChunk]:
        """Chunks that have no vector yet (or any), oldest first."""
        where = "" if any_chunk else "WHERE embedding IS NULL"
        rows = self._rows(
            "SELECT id, hash, context, text, "
            "(SELECT count(*) FROM chunks AS other WHERE other.path = chunks.path) = 1, overlap "
            f"FROM chunks {where} ORDER BY id LIMIT ?",
            (limit,),
        )
        return [
            PendingChunk(int(i), str(h), str(c), str(t), bool(w), int(o))
            for i, h, c, t, w, o in rows
        ]

    def cached_embeddings(self, key: ModelKey | None, hashes: Sequence[str]) -> dict[str, bytes]:
        if key is None or not hashes:
            return {}
        found = self._batches(
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? "
            "AND provider_key = ? AND hash IN ({marks})",
            hashes,
            key.provider,
            key.model,
            key.provider_key,
        )
        return {h: bytes(blob) for h, blob in found}

    def store_embeddings(
        self, key: ModelKey, items: Sequence[tuple[int, str, bytes]], dims: int
    ) -> int:
        """(chunk id, hash, vector) into the cache and onto the chunks, in one transaction;
        returns how many chunks took theirs (a chunk edited meanwhile does not)."""
        now = int(time.time())
        with self.transaction():
            if self.model_key() != key:
                return 0  # the model changed under us: these vectors belong to no index
            self._run_many(
                "INSERT INTO embedding_cache(provider, model, provider_key, hash, embedding, "
                "dims, updated_at) VALUES(?,?,?,?,?,?,?) ON CONFLICT(provider, model, "
                "provider_key, hash) DO UPDATE SET embedding = excluded.embedding, "
                "dims = excluded.dims, updated_at = excluded.updated_at",
                [(key.provider, key.model, key.provider_key, h, blob, dims, now)
                 for _, h, blob in items],
            )  # fmt: skip
            return self._attach_vectors(key, items)

    def loading_vectors(self, count: int) -> AbstractContextManager[None]:
        """Around adding `count` vectors at once: an engine may prepare for a bulk load."""
        return contextlib.nullcontext()

    def _allowed(self, only: NoteFilter) -> tuple[str, list[Any]]:
        """The condition on a chunk's `path` that `only` asks for (TRUE for none), and its
        arguments."""
        conditions: list[str] = []
        args: list[Any] = []
        if only.paths:
            condition, globbed = self._paths_matching(only.paths)
            conditions.append(condition)
            args += globbed
        day = self._column("files.date")
        if only.since:
            conditions.append(f"path IN (SELECT path FROM files WHERE {day} >= ?)")
            args.append(only.since)
        if only.until:
            conditions.append(f"path IN (SELECT path FROM files WHERE {day} <= ?)")
            args.append(only.until)
        for tag in only.tags:
            conditions.append(f"path IN (SELECT path FROM {self._tags()} WHERE tag = ?)")
            args.append(tag)
        return " AND ".join(conditions) or "TRUE", args

    def has_vectors(self) -> bool:
        """Whether any chunk has its vector (a query's check: no count over every chunk)."""
        return bool(self._rows("SELECT 1 FROM chunks WHERE embedding IS NOT NULL LIMIT 1"))

    def sample_scripts(self, size: int) -> set[str]:
        """The writing systems of up to `size` chunks spread over the index: what an index
        without vectors (or a query without them) has instead of the vector sample's."""
        sql = f"SELECT substr(text, 1, {fts.SCRIPT_SAMPLE}) FROM chunks WHERE id IN ({{marks}})"
        return {fts.script(text) for (text,) in self._batches(sql, self._sample_ids(size))}

    def _sample_ids(self, size: int) -> list[int]:
        """Up to `size` chunk ids spread evenly from the first to the last. Two subqueries: SQLite
        answers a lone min() or max() from the primary key, both in one select by reading every
        row (17 ms at 100k chunks, on every query's calibration sample)."""
        [(low, high)] = self._rows(
            "SELECT (SELECT min(id) FROM chunks), (SELECT max(id) FROM chunks)"
        )
        return [] if low is None else spread_ids(low, high, size)

    def pending_count(self) -> int:
        """Chunks without a vector (cheap: a partial index holds exactly those)."""
        return int(self._rows("SELECT count(*) FROM chunks WHERE embedding IS NULL")[0][0])

    # -- reading ----------------------------------------------------------------------------

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self._rows_of(
            "SELECT id, path, start_line, end_line, text, embedding, "
            f"{self._column('chunks.windows')} FROM chunks",
            ids,
        )
        return {
            r[0]: ChunkRow(
                r[0], r[1], r[2], r[3], r[4], None if r[5] is None else bytes(r[5]), r[6]
            )
            for r in rows
        }

    def keyword_search(
        self, terms: Sequence[str], any_term: bool, limit: int, only: NoteFilter = NoteFilter()
    ) -> tuple[list[tuple[int, float]], float | None]:
        ranked = self._keyword_ranking(terms, any_term)
        found = ranked(only, limit)
        # the best rank in the whole index calibrates a filtered query as the unfiltered one
        best = ranked(NoteFilter(), 1) if only and found else found
        return found, best[0][1] if best else None

    def sample_vectors(self, size: int) -> Background:
        """Up to `size` chunks spread evenly over the index, every window of each, and each
        one's script: the background a query's cosines are calibrated against. A long-lived
        reader keeps it while the index stays as it is, as it keeps the mean vectors; a one-shot
        store samples once, so a cache would cost it a version read for nothing."""
        if not self.vectors_in_memory:
            return self._read_sample(size)
        version = (self._index_version(), size)
        if self._sample is None or self._sample[0] != version:
            self._sample = (version, self._read_sample(size))
        return self._sample[1]

    def _read_sample(self, size: int) -> Background:
        found = self._rows_of(
            f"SELECT embedding, substr(text, 1, {fts.SCRIPT_SAMPLE}), path FROM chunks",
            self._sample_ids(size),
            "AND embedding IS NOT NULL ORDER BY id",
        )
        rows = [(bytes(r[0]), fts.script(r[1]), r[2]) for r in found]
        return Background.of(rows, self.dims() or 0)

    def vector_search(
        self,
        query: np.ndarray,
        limit: int,
        only: NoteFilter = NoteFilter(),
        probes: Sequence[np.ndarray] = (),
        every: bool = False,
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine distance of its nearest window) nearest first, in two steps: the
        chunks whose mean vector is nearest, coarse_pool(limit) of them (and as many nearest
        each of `probes`, other directions search looks in), then those scored exactly by their
        windows against the query; the `limit` nearest of them, or with `every` all. A search
        reads one vector per chunk and the windows of the few it keeps; `only` filters before
        the nearest are chosen, so a filtered query still gets its top k."""
        import numpy as np

        directions = [np.asarray(v, dtype=np.float32) for v in (query, *probes)]
        found = self._nearest_windows(directions, coarse_pool(limit), only)
        return rescored(found, directions[0], None if every else limit)

    def _nearest_windows(
        self, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """(chunk id, windows blob) of the `wanted` chunks whose mean vector is nearest each
        direction, each chunk once; `only` filters before the nearest are chosen. A long-lived
        reader takes this step in its memory; others by the engine's own search."""
        kept = self._kept_means() if self.vectors_in_memory else None
        if kept is None:
            return self._nearest_stored(directions, wanted, only)
        return self._nearest_of(kept, directions, wanted, only)

    def _nearest_of(
        self, means: MeanVectors, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """_nearest_windows by numpy's exact product over `means`."""
        import numpy as np

        permitted = None
        if only:  # the rows of the allowed chunks: a product over those
            allowed, args = self._allowed(only)
            found = self._rows(f"SELECT id FROM chunks WHERE {allowed}", args)
            permitted = np.array([r[0] for r in found], dtype=np.int64)
        near = dict.fromkeys(i for d in directions for i in means.nearest(d, wanted, permitted))
        return self._windows(list(near))

    def _windows(self, ids: Sequence[int]) -> Iterable[tuple[int, bytes]]:
        """(chunk id, windows blob) of the chunks `ids` that have their vectors."""
        rows = self._rows_of("SELECT id, embedding FROM chunks", ids)
        return ((int(i), bytes(b)) for i, b in rows if b is not None)

    def _keeps_means(self) -> bool:
        """Whether this store keeps the vault's mean vectors in memory: a long-lived reader's,
        while they fit in MEMORY_VECTOR_BYTES."""
        if not self.vectors_in_memory:
            return False
        vectors = self._rows("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")[0][0]
        return fit_in_memory(int(vectors), self.dims() or 0)

    def _kept_means(self) -> MeanVectors | None:
        """A long-lived reader's mean vectors, read again only when the index changed since;
        None for a vault whose vectors would take more than MEMORY_VECTOR_BYTES (the engine's
        own search serves it)."""
        version = self._index_version()
        kept = self._means
        if kept is not None and kept.version == version:
            return kept
        if self._too_many == version:
            return None
        self._means = None
        if not self._keeps_means():
            self._too_many = version
            return None
        updated = self._updated_means(kept, version) if kept is not None else None
        self._means = self._read_means(version) if updated is None else updated
        return self._means

    def _read_means(self, version: Any) -> MeanVectors:
        """Every chunk's mean vector, at unit length."""
        ids, rows = self._all_means()
        return MeanVectors(version, ids, unit_rows(rows))

    def counts(self) -> dict[str, int]:
        files, chunks, pending, cache = self._rows(
            "SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM chunks), "
            "(SELECT count(*) FROM chunks WHERE embedding IS NULL), "
            "(SELECT count(*) FROM embedding_cache)"
        )[0]
        return {
            "files": files,
            "chunks": chunks,
            "embedded": chunks - pending,
            "pending": pending,
            "cached_vectors": cache,
        }
