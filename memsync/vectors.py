"""Vectors, pure: the little-endian float32 codec the stores keep them in, unit length, and the
k nearest by a numpy product. numpy is imported where vectors are handled: a no-op sync never
needs it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def best_cosine(blob: bytes, query: np.ndarray) -> float:
    """The cosine of a chunk's nearest window (its blob's vectors, unit length) to `query`."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    rows = np.frombuffer(blob, dtype="<f4").reshape(-1, len(q))
    return float((rows @ (q / (np.linalg.norm(q) or 1.0))).max())


def spread_rows(matrix: np.ndarray, size: int) -> np.ndarray:
    """At most `size` rows spread evenly over the matrix (a calibration background)."""
    import numpy as np

    if len(matrix) <= size:
        return matrix
    picked: np.ndarray = matrix[np.linspace(0, len(matrix) - 1, num=size).astype(int)]
    return picked


def best_per_chunk(
    window_hits: Iterable[tuple[int, float]], windows: int
) -> list[tuple[int, float]]:
    """(window rowid, distance) nearest first -> (chunk id, its best window's distance): a
    chunk's windows are numbered chunk id x `windows` + window."""
    best: dict[int, float] = {}
    for rowid, distance in window_hits:
        best.setdefault(rowid // windows, distance)
    return list(best.items())


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


def nearest(
    ids: np.ndarray, matrix: np.ndarray, query: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    """(id, cosine distance) of the `limit` ids nearest to `query` in a unit-row matrix; rows of
    one id (a chunk's windows) are adjacent, and the id takes its best row."""
    import numpy as np

    if not len(ids):
        return []
    q = np.asarray(query, dtype=np.float32)
    # einsum, not BLAS: BLAS threads left spinning after a product slowed the next query
    # embedding (one OpenMP thread) from 9 to 40 ms
    similarity = np.einsum("ij,j->i", matrix, q / (np.linalg.norm(q) or 1.0))
    firsts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    if len(firsts) < len(ids):
        ids, similarity = ids[firsts], np.maximum.reduceat(similarity, firsts)
    top = np.argpartition(-similarity, min(limit, len(ids) - 1))[:limit]
    order = top[np.argsort(-similarity[top])]
    return [(int(ids[i]), float(1.0 - similarity[i])) for i in order]
