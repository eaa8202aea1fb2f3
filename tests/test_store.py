from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memsync.errors import StoreError
from memsync.store import SCHEMA_VERSION, FileRow, ModelKey, NewChunk, Store


def _tables(store: Store) -> set[str]:
    return {
        r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")
    }


def test_migrations_build_the_schema_on_an_empty_database(tmp_path: Path) -> None:
    with Store(tmp_path / "i.sqlite") as store:
        assert {"meta", "files", "chunks", "embedding_cache", "chunks_fts", "skipped"} <= _tables(
            store
        )
        assert store.meta()["schema_version"] == str(SCHEMA_VERSION)
        assert list(store.conn.execute("PRAGMA journal_mode"))[0][0] == "wal"
        columns = [r[1] for r in store.conn.execute("PRAGMA table_info(chunks)")]
        assert columns[:10] == [
            "id",
            "path",
            "source",
            "start_line",
            "end_line",
            "hash",
            "model",
            "text",
            "context",
            "embedding",
        ]
        assert store.integrity_check() == "ok"
    with Store(tmp_path / "i.sqlite") as again:  # reopening applies nothing twice
        assert again.meta()["schema_version"] == str(SCHEMA_VERSION)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "i.sqlite") as store:
        store.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer"):
        Store(tmp_path / "i.sqlite")


def test_missing_index_is_not_created_by_readers(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        Store(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


def _fill(store: Store, vectors: np.ndarray) -> None:
    key = ModelKey("test", "m", "")
    store.set_model(key, vectors.shape[1])
    chunks = [
        NewChunk(i + 1, i + 1, f"h{i}", f"text {i}", "", f"text {i}") for i in range(len(vectors))
    ]
    store.replace_file(FileRow("a.md", "x", 1, 1), chunks)
    ids = [r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")]
    blobs = [np.asarray(v, "<f4").tobytes() for v in vectors]
    store.store_embeddings(key, [(i, f"h{n}", b) for n, (i, b) in enumerate(zip(ids, blobs))], 8)


def test_numpy_fallback_finds_the_same_neighbours_as_sqlite_vec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    query = rng.normal(size=8).astype(np.float32)
    with Store(tmp_path / "vec.sqlite") as store:
        assert store.vec_version
        _fill(store, vectors)
        with_vec = store.vector_search(query, 5)
    monkeypatch.setenv("MEMSYNC_DISABLE_VEC", "1")
    with Store(tmp_path / "np.sqlite") as store:
        assert store.vector_backend.startswith("numpy")
        _fill(store, vectors)
        with_numpy = store.vector_search(query, 5)
    assert [i for i, _ in with_vec] == [i for i, _ in with_numpy]
    assert np.allclose([d for _, d in with_vec], [d for _, d in with_numpy], atol=1e-5)


def test_vectors_are_float32_blobs(tmp_path: Path) -> None:
    with Store(tmp_path / "i.sqlite") as store:
        _fill(store, np.eye(8, dtype=np.float32))
        blob = list(store.conn.execute("SELECT embedding FROM chunks LIMIT 1"))[0][0]
        assert isinstance(blob, bytes) and len(blob) == 32


def test_vectors_in_memory_match_sqlite_vec_and_see_other_writers(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    query = rng.normal(size=8).astype(np.float32)
    with Store(tmp_path / "i.sqlite") as writer:
        _fill(writer, vectors)
        by_vec = writer.vector_search(query, 5)
    with Store(tmp_path / "i.sqlite", vectors_in_memory=True) as reader:
        in_memory = reader.vector_search(query, 5)
        assert [i for i, _ in in_memory] == [i for i, _ in by_vec]
        assert np.allclose([d for _, d in in_memory], [d for _, d in by_vec], atol=1e-5)
        assert reader.sample_vectors(8).shape == (8, 8)
        with Store(tmp_path / "i.sqlite") as other:  # another connection removes the best match
            best = in_memory[0][0]
            path = list(other.conn.execute("SELECT path FROM chunks WHERE id = ?", (best,)))[0][0]
            other.remove_file(path)
        assert reader.vector_search(query, 5) == []
