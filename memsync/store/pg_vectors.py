"""The vector index of a PgStore vault through its life: the mean vectors' column (halfvec where
pgvector has it, converted once where it came later), the HNSW graph (made from
GRAPH_MIN_VECTORS vectors, rebuilt after a bulk load), its ef_search per session, the mean
vectors a long-lived reader keeps, and the first step of a search on the server."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..config import EF_SEARCH
from ..filters import NoteFilter
from ..vectors import MeanVectors, centroid, from_blob
from .pg_connect import psycopg_sql, scalar
from .protocols import ModelKey
from .sql_reading import SharedReading

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("memsync.pg")
# the HNSW graph, chosen for recall@10 >= 0.98 against exact search at 100k model-like chunks,
# which pgvector's defaults (m 16, ef_construction 64) do not reach; its search list is
# config.EF_SEARCH (benchmarks/NOTES.md)
HNSW_M, HNSW_EF_CONSTRUCTION = 32, 128
# the mean vectors' type: half precision where pgvector has it (0.7+; the same recall, a smaller
# graph, a faster graph step), and the most dimensions pgvector's
# HNSW indexes of each; above, search is exact
HNSW_MAX_DIMS = {"vector": 2000, "halfvec": 4000}
# a vault's mean vectors from which an HNSW graph is faster than an exact scan (benchmarks/NOTES.md);
# below, a vault is scanned exactly, as SQLite's sqlite-vec scans it: as fast, every neighbour
# found, no graph to build or hold in memory
GRAPH_MIN_VECTORS = 20_000
BULK_VECTORS = 1000  # vectors added at once, and most of a vault's, from which the graph is rebuilt


def mean_of(blob: bytes | None, dims: int) -> np.ndarray | None:
    """A chunk's coarse vector (vectors.centroid of its windows), sent in pgvector's binary
    form (as text, formatting and parsing the floats cost 45 us a vector)."""
    return from_blob(centroid(blob, dims)) if blob else None


class PgVectors(SharedReading):
    """The vault's mean vectors and their graph, over the shared tables' hooks."""

    ef_search: int = EF_SEARCH
    _session_ef_search = 0  # the session's hnsw.ef_search, once set
    _iterative: bool | None = None  # whether the server scans HNSW iteratively, once asked
    _version: str | None = None  # the server's pgvector, once read
    _kind: str | None = None  # the mean vectors' type, once read
    url: str
    name: str

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

    def _attach_vectors(self, key: ModelKey, items: Sequence[tuple[int, str, bytes]]) -> int:
        """One statement for the batch (a round trip per vector makes loads many times slower)."""
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
                    [mean_of(b, dims) for _, _, b in items],
                ),
            )
            return max(int(cursor.rowcount), 0)

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
        graph again over them: smaller, with a faster graph step and the same recall."""
        log.info(
            "converting the mean vectors to halfvec(%d) (once; then the graph is rebuilt)", dims
        )
        self.conn.execute(
            f"ALTER TABLE chunks ALTER COLUMN centroid TYPE halfvec({int(dims)}) "
            f"USING centroid::halfvec({int(dims)})"
        )
        self._kind = "halfvec"

    @property
    def vector_backend(self) -> str:
        kind, dims, graph = self._centroid_column()
        if graph:
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

    def _index_version(self) -> tuple[Any, ...]:
        """Changes when chunks come or go or get their vectors (ids are never reused), and with
        the model, whose change embeds every chunk again under its id; the model comes last."""
        row = self.conn.execute(
            "SELECT (SELECT rows FROM fts_totals), (SELECT max(id) FROM chunks), "
            "(SELECT count(*) FROM chunks WHERE embedding IS NULL), "
            "(SELECT string_agg(value, ' ' ORDER BY key) FROM meta "
            "WHERE key IN ('provider', 'model', 'provider_key', 'dims'))"
        ).fetchone()
        return tuple(row)

    def _kept_version(self) -> tuple[Hashable | None, Any]:
        """_index_version is read from the vault's rows: every connection reads it alike."""
        return (self.url, self.name), self._index_version()

    def _all_means(self) -> tuple[np.ndarray, np.ndarray]:
        return self._mean_rows(None)

    def _updated_means(self, kept: MeanVectors, version: Any) -> MeanVectors | None:
        """Only the new chunks' are read: under one model a chunk's mean never changes."""
        import numpy as np

        if kept.version[-1] != version[-1]:
            return None  # under another model, every chunk was embedded again
        ids = np.array(
            [r[0] for r in self.conn.execute(
                "SELECT id FROM chunks WHERE centroid IS NOT NULL ORDER BY id"
            )],
            dtype=np.int64,
        )  # fmt: skip
        return kept.updated(version, ids, self._mean_rows)

    def _mean_rows(self, ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, rows) of the mean vectors of the chunks `ids`, or of every chunk, by id: in
        pgvector's own binary form (a 4-byte header, then big-endian floats) joined into one
        buffer, no object per vector (a third of the time reading objects takes)."""
        import numpy as np

        dims = self.dims() or 0
        kind = self._centroid_column()[0]
        value = np.dtype(">f2" if kind == "halfvec" else ">f4")
        select = f"SELECT id, {kind}_send(centroid) FROM chunks WHERE centroid IS NOT NULL"
        with self.conn.cursor(binary=True) as cursor:
            if ids is None:
                cursor.execute(f"{select} ORDER BY id")
            else:
                cursor.execute(f"{select} AND id = ANY(%s) ORDER BY id", (ids.tolist(),))
            rows = cursor.fetchall()
        packed = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint8)
        floats = packed.reshape(len(rows), 4 + dims * value.itemsize)[:, 4:].copy()
        matrix = floats.view(value).astype(np.float32).reshape(len(rows), dims)
        return np.array([r[0] for r in rows], dtype=np.int64), matrix

    def _nearest_stored(
        self, directions: Sequence[np.ndarray], wanted: int, only: NoteFilter
    ) -> Iterable[tuple[int, bytes]]:
        """The HNSW graph (a vault below GRAPH_MIN_VECTORS has none and is scanned exactly); for
        a filtered search only where pgvector (0.8+) scans it iteratively until enough allowed
        chunks pass, and an exact scan of the allowed chunks otherwise or when the graph yields
        fewer (a filter that allows few: HNSW filters after its candidate list); exact too where
        k is beyond what ef_search may be."""
        allowed, args = self._allowed(only)
        allowed = psycopg_sql(allowed)
        rows = {
            row[0]: row
            for d in directions
            for row in self._nearest_on_server(d, wanted, only, allowed, args)
        }
        return ((int(i), bytes(b)) for i, b in rows.values() if b is not None)

    def _nearest_on_server(
        self, vector: np.ndarray, wanted: int, only: NoteFilter, allowed: str, args: list[Any]
    ) -> list[tuple[Any, ...]]:
        """(id, windows) of the `wanted` chunks whose mean is nearest: through the graph where
        it serves, else an exact scan. Rows in binary form: the windows' hex text costs a query
        three times as much to send and decode."""
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
