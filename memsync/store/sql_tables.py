"""The policy both backends share, and the SQL they run alike: the tables every index has, in
SQL that SQLite and PostgreSQL read the same way (`?` placeholders, which PgStore turns into
psycopg's). Each engine supplies small hooks (its vector storage, its chunk rows); the schema's
steps are sql_schema's, the reader's half sql_reading's, each engine's own tables stay in
sqlite_store and pg_store."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from .. import fts
from ..filters import NoteFilter
from .protocols import (
    SOURCE,
    FileFacts,
    FileRow,
    ModelKey,
    NewChunk,
    NoteRow,
    NoteWrite,
    PendingChunk,
    SkipRow,
    spread_ids,
)
from .sql_links import LinkTables

T = TypeVar("T", bound="SharedTables")


class SharedTables(LinkTables):
    """meta, files, tags, skipped and the embedding cache, over `_rows` and `_run_many`."""

    vectors_in_memory: bool = False  # a long-lived reader's: it keeps the mean vectors
    _second_connection: Any = None  # second_connection()'s connection, once opened

    def close(self) -> None:
        if self._second_connection is not None:
            self._second_connection.close()
            self._second_connection = None
        self.conn.close()

    def second_connection(self: T) -> T:
        """A second connection to this index, opened once and kept: the keyword leg runs on it
        while this one searches the vectors (a connection answers one statement at a time)."""
        if self._second_connection is None:
            self._second_connection = self._reopened()
        companion: T = self._second_connection
        return companion

    def _reopened(self: T) -> T:
        """Another reader of the same index."""
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _delete_chunks(self, paths: Sequence[str]) -> None:
        """The chunks of these notes, with everything kept beside them."""
        raise NotImplementedError

    def _move_chunks(self, old: str, new: str) -> None:
        """A renamed note's chunks under its new path (an engine moves what it keeps beside them)."""
        self._run_many("UPDATE chunks SET path = ? WHERE path = ?", [(new, old)])

    # the engine's hooks under the shared policy below

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
        """A condition on `path` true for any of the globs (SQLite's GLOB semantics), one
        argument however many: a search may have a thousand filters."""
        raise NotImplementedError

    def _any_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """A condition true where `column` is one of `values`, passed as one argument."""
        raise NotImplementedError

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
            self._chunks_changed()

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

    def note_page(self, after: str, limit: int) -> list[NoteRow]:
        order = f"path{self.CODE_POINTS}"
        title = self._column("files.title")
        rows = self._rows(
            f"SELECT path, size, mtime, {title} FROM files WHERE {order} > ? ORDER BY {order} "
            "LIMIT ?",
            (after, limit),
        )
        return [NoteRow(*row) for row in rows]

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
            self._links_moved(old, new)
            self._chunks_changed()

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
            self._chunks_changed()

    def remove_file(self, path: str, skip: SkipRow | None = None) -> None:
        """A note gone from the index: deleted, or now skipped for the reason `skip` gives."""
        with self.transaction():
            self._delete_chunks([path])
            self._run_many("DELETE FROM files WHERE path = ?", [(path,)])
            self._run_many("DELETE FROM tags WHERE path = ?", [(path,)])
            self._links_gone(path)
            if skip is not None:
                self._insert_skips([skip])
            self._chunks_changed()

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
        self._write_links(notes)

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
            self._chunks_changed()
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
        if only.tags:  # the notes holding every tag: one list, however many (no deep tree)
            wanted = sorted(set(only.tags))
            any_tag, listed = self._any_of("tag", wanted)
            conditions.append(
                f"path IN (SELECT path FROM {self._tags()} WHERE {any_tag} "
                "GROUP BY path HAVING count(*) = ?)"
            )
            args += [*listed, len(wanted)]
        return " AND ".join(conditions) or "TRUE", args

    def has_vectors(self) -> bool:
        """Whether any chunk has its vector (a query's check: no count over every chunk)."""
        return bool(self._rows("SELECT 1 FROM chunks WHERE embedding IS NOT NULL LIMIT 1"))

    def sample_scripts(self, size: int) -> set[str]:
        """The writing systems of up to `size` chunks spread over the index: what an index
        without vectors (or a query without them) has instead of the vector sample's."""
        sql = f"SELECT {self._script_column()} FROM chunks WHERE id IN ({{marks}})"
        return {self._script(value) for (value,) in self._batches(sql, self._sample_ids(size))}

    def _script_column(self) -> str:
        """A chunk's script as its writer recorded it, or in an older index without it, the
        start of its text, which `_script` reads it from as the writer would have."""
        return "script" if self._has("chunks.script") else f"substr(text, 1, {fts.SCRIPT_SAMPLE})"

    def _record_scripts(self) -> None:
        """Every chunk's script, from its text (the "chunk scripts" step, in its transaction)."""
        found = self._rows(f"SELECT id, substr(text, 1, {fts.SCRIPT_SAMPLE}) FROM chunks")
        self._run_many(
            "UPDATE chunks SET script = ? WHERE id = ?", [(fts.script(t), i) for i, t in found]
        )

    def _script(self, selected: str) -> str:
        """A chunk's script from what `_script_column` selected."""
        return selected if self._has("chunks.script") else fts.script(selected)

    def _sample_ids(self, size: int) -> list[int]:
        """Up to `size` chunk ids spread evenly from the first to the last. Two subqueries: SQLite
        answers a lone min() or max() from the primary key, both in one select by reading every
        row (on every query's calibration sample)."""
        [(low, high)] = self._rows(
            "SELECT (SELECT min(id) FROM chunks), (SELECT max(id) FROM chunks)"
        )
        return [] if low is None else spread_ids(low, high, size)

    def pending_count(self) -> int:
        """Chunks without a vector (cheap: a partial index holds exactly those)."""
        return int(self._rows("SELECT count(*) FROM chunks WHERE embedding IS NULL")[0][0])

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
