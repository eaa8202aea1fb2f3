"""Vectors, pure: the blob codec, each chunk's nearest window, the coarse step's mean vectors and
the exact rescoring after it, checked against plain loops."""

from __future__ import annotations

import numpy as np
import pytest

from memsync.errors import EmbeddingResponseError
from memsync.vectors import (
    MeanVectors,
    centroid,
    from_blob,
    nearest,
    nearest_windows,
    normalise,
    placed_scripts,
    rescored,
    to_blob,
    unit_rows,
    window_cosines,
    window_rows,
)

DIMS = 8


def units(count: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, DIMS)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_blob_is_little_endian_float32_and_round_trips() -> None:
    vector = np.array([1.0, -2.5, 0.0, 3.25], dtype=np.float64)
    blob = to_blob(vector)
    assert blob == np.array(vector, dtype="<f4").tobytes() and len(blob) == 16
    assert from_blob(blob).tolist() == [1.0, -2.5, 0.0, 3.25]


def test_each_chunk_scores_by_its_nearest_window() -> None:
    windows = units(7)
    blobs = [to_blob(windows[:3]), to_blob(windows[3:4]), to_blob(windows[4:])]
    counts, rows = window_rows(blobs, DIMS)
    assert counts.tolist() == [3, 1, 3] and rows.shape == (7, DIMS)
    query = units(1, seed=1)[0]
    expected = [
        max(float(w @ query) for w in part) for part in (windows[:3], windows[3:4], windows[4:])
    ]
    assert nearest_windows(counts, rows, query) == pytest.approx(expected, abs=1e-6)
    cosines = window_cosines(blobs[0], query)  # one chunk's windows, each scored
    assert cosines == pytest.approx([float(w @ query) for w in windows[:3]], abs=1e-6)
    assert float(cosines.max()) == pytest.approx(expected[0], abs=1e-6)
    among_first_two = int(np.argmax(windows[:2] @ query))
    assert int(cosines[:2].argmax()) == among_first_two
    assert nearest_windows(*window_rows([], DIMS), query).tolist() == []


def test_a_chunk_s_mean_vector_is_its_windows_mean_at_unit_length() -> None:
    windows = units(3)
    mean = from_blob(centroid(to_blob(windows), DIMS))
    expected = windows.mean(axis=0) / np.linalg.norm(windows.mean(axis=0))
    assert mean == pytest.approx(expected, abs=1e-6)


def test_rescoring_orders_by_cosine_distance_and_drops_empty_blobs() -> None:
    windows = units(4)
    query = windows[2]
    scored = rescored(
        [(10, to_blob(windows[:2])), (11, b""), (12, to_blob(windows[2:]))], query, None
    )
    assert [i for i, _ in scored] == [12, 10]
    assert scored[0][1] == pytest.approx(0.0, abs=1e-6)
    assert (
        rescored([(12, to_blob(windows[2:])), (10, to_blob(windows[:2]))], query, 1) == scored[:1]
    )


def test_the_nearest_rows_come_first_as_a_full_sort_orders_them() -> None:
    matrix = units(50)
    ids = np.arange(100, 150)
    query = units(1, seed=2)[0]
    found = nearest(ids, matrix, query, 5)
    distances = 1.0 - matrix @ query
    assert [i for i, _ in found] == [int(ids[j]) for j in np.argsort(distances)[:5]]
    assert [d for _, d in found] == pytest.approx(sorted(distances)[:5], abs=1e-6)
    assert nearest(ids[:0], matrix[:0], query, 5) == []


def test_kept_mean_vectors_follow_the_index_and_filter_before_the_top_k() -> None:
    matrix = units(6)
    fetched: list[list[int]] = []

    def fetch(wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        fetched.append(wanted.tolist())
        return wanted, matrix[wanted]

    kept = MeanVectors.empty(DIMS).updated((1,), np.array([0, 1, 2, 3]), fetch)
    kept = kept.updated((2,), np.array([1, 3, 4, 5]), fetch)  # 0 and 2 deleted, 4 and 5 new
    assert fetched == [[0, 1, 2, 3], [4, 5]]  # a kept chunk's vector is never fetched again
    assert kept.ids.tolist() == [1, 3, 4, 5] and kept.version == (2,)
    query = matrix[4]
    assert kept.nearest(query, 1) == [4]
    assert kept.nearest(query, 1, allowed=np.array([1, 5])) in ([1], [5])
    assert len(kept.nearest(query, 10, allowed=np.array([1, 5]))) == 2


def test_a_vector_without_a_direction_is_a_provider_error() -> None:
    assert np.linalg.norm(normalise(np.array([[3.0, 4.0]])), axis=1) == pytest.approx([1.0])
    for bad in ([[0.0, 0.0]], [[np.nan, 1.0]], [[np.inf, 1.0]]):
        with pytest.raises(EmbeddingResponseError):
            normalise(np.array(bad))
    assert unit_rows(np.array([[0.0, 0.0], [0.0, 2.0]])).tolist() == [[0.0, 0.0], [0.0, 1.0]]


def test_a_script_counts_as_placed_by_the_notes_it_was_sampled_from() -> None:
    pairs = [("latin", "a.md"), ("latin", "a.md"), ("latin", "b.md"), ("han", "c.md")] * 3
    assert placed_scripts(pairs, 2) == {"latin"}
    assert placed_scripts(pairs, 1) == {"latin", "han"}
