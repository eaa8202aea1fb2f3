"""The team backend: PostgreSQL + pgvector, one schema per vault beside one shared schema.

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

PgStore is assembled from one module a job: the connection, its errors and the shared schema
(pg_connect), the vault's schema and its steps (pg_schema), the vector index (pg_vectors) and
BM25's counters (pg_keywords); this module writes the chunks and shares the embedding cache.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .. import fts
from ..config import EF_SEARCH
from ..redact import redact
from .pg_bm25 import tsvector_of
from .pg_connect import SHARED, connect, database_error, psycopg_sql
from .pg_keywords import PgKeywords
from .pg_schema import VaultSchema
from .pg_vectors import PgVectors, mean_of
from .protocols import SOURCE, ModelKey, NoteWrite, translating


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


@translating(database_error)
class PgStore(PgKeywords, PgVectors, VaultSchema):
    """One vault's index in a PostgreSQL database (its own schema); many readers on any machine,
    one writer at a time (AdvisoryLock)."""

    CODE_POINTS = ' COLLATE "C"'

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
        self.label = f"{redact(url)} (vault {name})"
        self.read_only = False
        self.ef_search = ef_search
        self.vectors_in_memory = vectors_in_memory
        self.conn = connect(url)
        try:
            self._open(create)
        except BaseException:
            self.conn.close()
            raise

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = self.conn.execute(psycopg_sql(sql), args).fetchall()
        return rows

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(psycopg_sql(sql), rows)

    def _rows_of(
        self, select: str, ids: Sequence[int], tail: str = ""
    ) -> Iterable[tuple[Any, ...]]:
        """Rows in binary form: vectors as bytes (parsing their text form costs 100 us each)."""
        found: list[tuple[Any, ...]] = self.conn.execute(
            f"{select} WHERE id = ANY(%s) {tail}", (list(ids),), binary=True
        ).fetchall()
        return found

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    def _reopened(self) -> PgStore:
        return PgStore(self.url, self.name)

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
                    blob, mean_of(blob, dims), literal, length,
                    now, chunk.overlap, chunk.window_lines, fts.script(chunk.text),
                )
            )  # fmt: skip
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, model, text, "
                "context, embedding, centroid, fts, fts_len, updated_at, overlap, windows, script) "
                f"VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%b::{self._centroid_kind()},%s::tsvector,%s,%s,"
                "%s,%s,%s)",
                values,
            )
            self._count_tokens(cursor, len(values), tokens, frequencies)

    def replace_files(self, notes: Sequence[NoteWrite]) -> None:
        """As every backend does, its statements pipelined: one round trip, not one each."""
        with self.conn.pipeline():
            super().replace_files(notes)

    def _paths_matching(self, globs: Sequence[str]) -> tuple[str, list[Any]]:
        """Matched against the notes, not each of their chunks: 5x fewer rows."""
        return "path IN (SELECT path FROM files WHERE path ~ ANY(?))", [
            [_glob_regex(p) for p in globs]
        ]

    def _any_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def cached_embeddings(self, key: ModelKey | None, hashes: Sequence[str]) -> dict[str, bytes]:
        """One index probe per hash: the cache is shared by every vault of the database, and
        with `hash IN (...)` the planner read all of a model's rows for each batch, a cost that
        grows with the cache (analyzed or not)."""
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
