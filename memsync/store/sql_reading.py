"""What a reader of either backend reads through the shared tables: chunks by id, a keyword
query's best ranks, the calibration sample, and the two steps of a vector search, with the
mean vectors a long-lived reader keeps in memory. Each engine (sqlite_store, pg_store) supplies
the hooks: its rows by id, its keyword ranking, its index version, its own nearest search.
What a long-lived reader keeps, its connections of one process share (kept.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..filters import NoteFilter
from ..vectors import (
    CalibrationSample,
    MeanVectors,
    coarse_pool,
    fit_in_memory,
    rescored,
    unit_rows,
)
from .kept import Kept, kept_for
from .protocols import ChunkRow
from .sql_tables import SharedTables
from .tokenizer import tokens

if TYPE_CHECKING:
    import numpy as np

# a keyword ranking of one query: (the notes it may find, how many) -> (chunk id, bm25 rank)
Ranking = Callable[[NoteFilter, int], list[tuple[int, float]]]


class SharedReading(SharedTables):
    """The reader's half of the shared policy, over the engine's hooks."""

    # a long-lived reader's kept mean vectors and sample, and the index they are shared under
    _kept: tuple[Hashable | None, Kept] | None = None
    # the index's version, its chunks and each token's chunk count read so far (word_chunks)
    _word_counts: tuple[Any, int, dict[str, int]] | None = None

    def close(self) -> None:
        self._kept = None  # the process's copy goes with the last connection that holds it
        super().close()

    def _rows_of(
        self, select: str, ids: Sequence[int], tail: str = ""
    ) -> Iterable[tuple[Any, ...]]:
        """`select` (up to its FROM) for the chunks `ids`, `tail` after their condition."""
        raise NotImplementedError

    def _keyword_ranking(self, terms: Sequence[str], any_term: bool) -> Ranking:
        """How the engine ranks chunks by FTS5's bm25 for these terms (every one, or any)."""
        raise NotImplementedError

    def _token_chunks(self, tokens: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each of the keyword index's tokens (those it holds)."""
        raise NotImplementedError

    def _index_version(self) -> Any:
        """Changes whenever the index's chunks or their vectors may have changed."""
        raise NotImplementedError

    def _kept_version(self) -> tuple[Hashable | None, Any]:
        """(the index as this process names it, its version) where every connection to it reads
        the same version for the same state of the index, so that they share one copy of what
        they keep; (None, this connection's version) where the version is its own."""
        return None, self._index_version()

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

    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        rows = self._rows_of(
            "SELECT id, path, start_line, end_line, text, embedding, "
            f"{self._column('chunks.windows')}, {self._script_column()} FROM chunks",
            ids,
        )
        return {
            r[0]: ChunkRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                None if r[5] is None else bytes(r[5]),
                r[6],
                self._script(r[7]),
            )
            for r in rows
        }

    def note_chunks(self, path: str) -> list[ChunkRow]:
        """A note's chunks in the order of its lines, with their vectors."""
        found = self._rows("SELECT id FROM chunks WHERE path = ? ORDER BY start_line, id", [path])
        ids = [int(r[0]) for r in found]
        rows = self.chunks(ids)
        return [rows[i] for i in ids if i in rows]

    def word_chunks(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(the chunks in the index, how many of them hold each word, as the keyword index
        spells it: stemmed and folded by its tokenizer); a word it does not hold is left out.
        The counts are kept while the index stays as it is: a vault's common words, whose counts
        cost the most to read, come back in every note."""
        spelled = {word: tokens(word) for word in dict.fromkeys(words)}
        single = {word: found[0] for word, found in spelled.items() if len(found) == 1}
        version = self._index_version()
        if self._word_counts is None or self._word_counts[0] != version:
            total = int(self._rows("SELECT count(*) FROM chunks")[0][0])
            self._word_counts = (version, total, {})
        _, total, known = self._word_counts
        missing = sorted({token for token in single.values() if token not in known})
        if missing:
            held = self._token_chunks(missing)
            known.update({token: held.get(token, 0) for token in missing})
        return total, {word: known[token] for word, token in single.items() if known[token]}

    def keyword_search(
        self, terms: Sequence[str], any_term: bool, limit: int, only: NoteFilter = NoteFilter()
    ) -> tuple[list[tuple[int, float]], float | None]:
        ranked = self._keyword_ranking(terms, any_term)
        found = ranked(only, limit)
        # the best rank in the whole index calibrates a filtered query as the unfiltered one
        best = ranked(NoteFilter(), 1) if only and found else found
        return found, best[0][1] if best else None

    def sample_vectors(self, size: int) -> CalibrationSample:
        """Up to `size` chunks spread evenly over the index, every window of each, and each
        one's script: the background a query's cosines are calibrated against. A long-lived
        reader keeps it while the index stays as it is, as it keeps the mean vectors; a one-shot
        store samples once, so a cache would cost it a version read for nothing."""
        if not self.vectors_in_memory:
            return self._read_sample(size)
        index, version = self._kept_version()
        return self._keeping(index).sample((version, size), lambda: self._read_sample(size))

    def _read_sample(self, size: int) -> CalibrationSample:
        found = self._rows_of(
            f"SELECT embedding, {self._script_column()}, path FROM chunks",
            self._sample_ids(size),
            "AND embedding IS NOT NULL ORDER BY id",
        )
        rows = [(bytes(r[0]), self._script(r[1]), r[2]) for r in found]
        return CalibrationSample.of(rows, self.dims() or 0)

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

    @property
    def keeps_mean_vectors(self) -> bool:
        """Whether this reader searches the mean vectors it keeps in memory (a server's), not
        through the index's own backend: `status` says so beside vector_backend."""
        return self._keeps_means() and self.has_vectors()

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
        index, version = self._kept_version()
        return self._keeping(index).means(
            version,
            fit=self._keeps_means,
            update=lambda kept: self._updated_means(kept, version),
            read=lambda: self._read_means(version),
        )

    def _keeping(self, index: Hashable | None) -> Kept:
        """Where this connection keeps what it keeps: the process's copy of `index`, or its own
        for None."""
        if self._kept is None or self._kept[0] != index:
            self._kept = (index, kept_for(index))
        return self._kept[1]

    def _read_means(self, version: Any) -> MeanVectors:
        """Every chunk's mean vector, at unit length."""
        ids, rows = self._all_means()
        return MeanVectors(version, ids, unit_rows(rows))
