"""Vectors, pure: the little-endian float32 codec the stores keep them in, unit length, and the
k nearest by a numpy product. numpy is imported where vectors are handled: a no-op sync never
needs it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import EmbeddingResponseError

if TYPE_CHECKING:
    import numpy as np


def to_blob(vector: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    import numpy as np

    return np.frombuffer(blob, dtype="<f4")


def window_rows(blobs: Sequence[bytes], dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks' blobs (each its windows' vectors end to end) -> the row count of each blob and
    one row per window."""
    import numpy as np

    if not blobs or not dims:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32)
    counts = np.array([len(b) // (4 * dims) for b in blobs], dtype=np.int64)
    return counts, np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dims)


def nearest_windows(counts: np.ndarray, windows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The cosine of each chunk's nearest window to `query`: `windows` holds the chunks' window
    vectors chunk after chunk, `counts` how many each chunk has."""
    import numpy as np

    if not len(counts):
        return np.zeros(0)
    q = np.asarray(query, dtype=np.float32)
    similarity = unit_rows(windows) @ (q / (np.linalg.norm(q) or 1.0))
    best: np.ndarray = np.maximum.reduceat(similarity, np.r_[0, np.cumsum(counts)[:-1]])
    return best


def window_cosines(blob: bytes, query: np.ndarray) -> np.ndarray:
    """The cosine of each of a chunk's windows (its blob's vectors, in the order embedded) with
    `query`: its nearest window's cosine scores it, and the lines of the nearest it shows."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    similarity: np.ndarray = unit_rows(window_rows([blob], len(q))[1]) @ (
        q / (np.linalg.norm(q) or 1.0)
    )
    return similarity


def centroid(blob: bytes, dims: int) -> bytes:
    """A chunk's one vector for the coarse search: its windows' mean, at unit length (the mean
    of unit vectors points where most of them do)."""
    import numpy as np

    mean = np.frombuffer(blob, dtype="<f4").reshape(-1, dims).mean(axis=0)
    return to_blob(mean / (np.linalg.norm(mean) or 1.0))


def placed_scripts(sampled_from: Iterable[tuple[str, str]], minimum: int) -> set[str]:
    """The scripts sampled from `minimum` notes or more, of (script, note) pairs: the chunks of
    one long note share its subject as well as its language, so their own mean is no measure of
    the language alone."""
    notes = Counter(kind for kind, _ in set(sampled_from))
    return {kind for kind, count in notes.items() if count >= minimum}


@dataclass(frozen=True)
class CalibrationSample:
    """Sampled chunks, every window of each: what a query's cosines are calibrated against."""

    windows: np.ndarray  # the sampled chunks' window vectors, chunk after chunk
    counts: np.ndarray  # how many windows each sampled chunk has
    sampled_from: list[tuple[str, str]]  # each sampled chunk's (script, note)

    @classmethod
    def of(cls, rows: Sequence[tuple[bytes, str, str]], dims: int) -> CalibrationSample:
        """From (windows blob, script, note) of each sampled chunk."""
        counts, windows = window_rows([blob for blob, _, _ in rows], dims)
        return cls(windows, counts, [(script, note) for _, script, note in rows])

    def probes(self, query: np.ndarray, script: str, minimum: int) -> list[np.ndarray]:
        """The query moved from its script's mean window vector to each other script's (those
        sampled from `minimum` notes or more): a multilingual model gives each language a
        direction of its own, so an English question's nearest mean vectors are English chunks,
        whatever they say; moved, it finds the Chinese chunks about the same thing (`--mode
        vector` found a Chinese note 149th of 219 chunks by its mean vector, first once moved)."""
        import numpy as np

        per_window = np.repeat(np.array([kind for kind, _ in self.sampled_from]), self.counts)
        means = {
            name: self.windows[per_window == name].mean(axis=0)
            for name in placed_scripts(self.sampled_from, minimum)
        }
        if script not in means:
            return []
        q = np.asarray(query, dtype=np.float32)
        moved = [q - means[script] + mean for name, mean in means.items() if name != script]
        return [m / (np.linalg.norm(m) or 1.0) for m in moved]

    def best_cosines(self, query: np.ndarray) -> np.ndarray:
        """Each sampled chunk's nearest window's cosine: the statistic a candidate is scored by,
        so that a chunk of many windows is not judged against single windows."""
        return nearest_windows(self.counts, self.windows, query)


COARSE, COARSE_MIN = 4, 100  # chunks the mean vectors choose, per chunk asked for (at least)


def coarse_pool(limit: int) -> int:
    """How many chunks the coarse search (one mean vector per chunk) passes to the exact one."""
    return max(limit * COARSE, COARSE_MIN)


def rescored(
    candidates: Iterable[tuple[int, bytes]], query: np.ndarray, limit: int | None
) -> list[tuple[int, float]]:
    """(chunk id, windows blob) -> (chunk id, cosine distance of its nearest window), the
    `limit` nearest first (all with None): the exact score of the chunks the coarse search found
    (one product over all their windows)."""
    found = [(i, blob) for i, blob in candidates if blob]
    if not found:
        return []
    best = nearest_windows(*window_rows([blob for _, blob in found], len(query)), query)
    scored = sorted((float(1.0 - d), i) for (i, _), d in zip(found, best))
    return [(i, d) for d, i in scored[:limit] if d == d]  # an old NaN vector has no place


def normalise(matrix: np.ndarray, source: str = "the model") -> np.ndarray:
    """Unit vectors; a NaN, infinite or all-zero vector is a provider error: stored, it would have
    no direction to compare, and every search over it would fail."""
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    if not np.all(np.isfinite(norms)):
        raise EmbeddingResponseError(f"{source} returned vectors with NaN or infinite values")
    if np.any(norms == 0):
        raise EmbeddingResponseError(f"{source} returned an all-zero vector")
    unit: np.ndarray = matrix / norms
    return unit


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Stored rows at unit length (a zero row, stored by an older memsync, stays zero)."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


# a long-lived reader keeps a vault's mean vectors in memory up to this size (about 166k chunks
# of the local model): the product over them is exact and beats a graph walk or a scan; a
# larger vault is searched by the store (an agent's server should not hold gigabytes)
MEMORY_VECTOR_BYTES = 256 << 20


def fit_in_memory(count: int, dims: int) -> bool:
    return count * dims * 4 <= MEMORY_VECTOR_BYTES


@dataclass(frozen=True)
class MeanVectors:
    """Every chunk's mean vector at unit length, kept by a long-lived reader (an agent's server)
    between queries: a numpy product over them is exact, and at 100k chunks faster than walking
    a graph on the server."""

    version: tuple[object, ...]  # the state of the index they are of
    ids: np.ndarray  # sorted
    matrix: np.ndarray

    def updated(
        self,
        version: tuple[object, ...],
        ids: np.ndarray,
        fetch: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    ) -> MeanVectors:
        """The vectors of the chunks `ids` (sorted) now: those gone dropped, the new ones fetched
        (`fetch(new ids)` -> (ids, rows)); under one model a chunk's mean vector never changes
        under its id."""
        import numpy as np

        kept = np.isin(self.ids, ids)
        added, rows = fetch(np.setdiff1d(ids, self.ids, assume_unique=True))
        merged = np.concatenate([self.ids[kept], added])
        order = np.argsort(merged, kind="stable")
        matrix = np.concatenate([self.matrix[kept], unit_rows(rows)])[order]
        return MeanVectors(version, merged[order], matrix)

    def nearest(
        self, query: np.ndarray, limit: int, allowed: np.ndarray | None = None
    ) -> list[int]:
        """The ids of the `limit` chunks whose mean is nearest to `query`, nearest first; only
        among the ids `allowed` when given (a filtered search still gets its top k)."""
        import numpy as np

        ids, matrix = self.ids, self.matrix
        if allowed is not None:
            rows = np.isin(ids, allowed)
            ids, matrix = ids[rows], matrix[rows]
        return [i for i, _ in nearest(ids, matrix, query, limit)]

    @classmethod
    def empty(cls, dims: int) -> MeanVectors:
        import numpy as np

        return cls((), np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32))


def nearest(
    ids: np.ndarray, matrix: np.ndarray, query: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    """(id, cosine distance) of the `limit` rows of a unit-row matrix nearest to `query`."""
    import numpy as np

    if not len(ids):
        return []
    q = np.asarray(query, dtype=np.float32)
    # einsum, not BLAS: BLAS threads left spinning after a product slow the next query's
    # embedding, which runs on one OpenMP thread
    similarity = np.einsum("ij,j->i", matrix, q / (np.linalg.norm(q) or 1.0))
    top = np.argpartition(-similarity, min(limit, len(ids) - 1))[:limit]
    order = top[np.argsort(-similarity[top])]
    return [(int(ids[i]), float(1.0 - similarity[i])) for i in order]
