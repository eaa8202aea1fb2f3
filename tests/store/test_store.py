from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memsync.chunking import chunk_text, embed_inputs
from memsync.errors import StoreError
from memsync.filters import NoteFilter
from memsync.store.protocols import FileRow, ModelKey, NewChunk, NoteWrite
from memsync.store.sqlite_store import MIGRATIONS, SCHEMA_VERSION, SqliteStore
from memsync.sync.syncer import index_vault
from tests.conftest import HashEmbedder, older_index, write


def _tables(store: SqliteStore) -> set[str]:
    return {
        r[0] for r in store.conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")
    }


def test_migrations_build_the_schema_on_an_empty_database(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "i.sqlite") as store:
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
    with SqliteStore(tmp_path / "i.sqlite") as again:  # reopening applies nothing twice
        assert again.meta()["schema_version"] == str(SCHEMA_VERSION)


def test_missing_index_is_not_created_by_readers(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        SqliteStore(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


def _fill(store: SqliteStore, vectors: np.ndarray) -> None:
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
    with SqliteStore(tmp_path / "vec.sqlite") as store:
        assert store.vec_version
        _fill(store, vectors)
        with_vec = store.vector_search(query, 5)
    monkeypatch.setenv("MEMSYNC_DISABLE_VEC", "1")
    with SqliteStore(tmp_path / "np.sqlite") as store:
        assert store.vector_backend.startswith("numpy")
        _fill(store, vectors)
        with_numpy = store.vector_search(query, 5)
    assert [i for i, _ in with_vec] == [i for i, _ in with_numpy]
    assert np.allclose([d for _, d in with_vec], [d for _, d in with_numpy], atol=1e-5)


def test_vectors_are_float32_blobs(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "i.sqlite") as store:
        _fill(store, np.eye(8, dtype=np.float32))
        blob = list(store.conn.execute("SELECT embedding FROM chunks LIMIT 1"))[0][0]
        assert isinstance(blob, bytes) and len(blob) == 32


def test_a_database_that_memsync_did_not_make_is_refused_and_left_unchanged(
    tmp_path: Path,
) -> None:
    import hashlib

    import apsw

    other = tmp_path / "app.sqlite"
    conn = apsw.Connection(str(other))
    conn.execute(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES(1, 'x')"
    )
    conn.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    for create in (False, True):
        with pytest.raises(StoreError, match="not a memsync index; it was left unchanged"):
            SqliteStore(other, create=create)
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]  # no -wal, no -shm
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all\n" * 100)
    with pytest.raises(StoreError, match="not a memsync index"):
        SqliteStore(text, create=False)
    assert text.read_text() == "not a database at all\n" * 100


def test_an_index_this_user_cannot_write_opens_read_only(world_readable: Path) -> None:
    from tests.conftest import as_nobody

    db = world_readable / "i.sqlite"
    with SqliteStore(db) as store:
        _fill(store, np.eye(3, dtype=np.float32))
    db.chmod(0o644)

    def read() -> str:
        with SqliteStore(db, create=False) as store:
            return f"{store.read_only} {store.counts()['chunks']} {store.vector_search(np.eye(3)[0], 1)[0][0]}"

    assert as_nobody(read) == "True 3 1"


def test_database_errors_become_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    from memsync.store.sqlite_store import database_error

    with SqliteStore(tmp_path / "i.sqlite") as store:
        pages = list(store.conn.execute("PRAGMA page_count"))[0][0]
        store.conn.execute(f"PRAGMA max_page_count={pages}")  # a full disk, as SQLite sees one
        with pytest.raises(StoreError) as raised:  # translated where it arose: in the store
            store.replace_file(
                FileRow("big.md", "h", 1, 1),
                [NewChunk(1, 1, f"h{i}", "words " * 2000, "", "words " * 2000) for i in range(20)],
            )
        problem = database_error(raised.value.__cause__)  # type: ignore[arg-type]
        assert problem is not None and "disk that holds the index is full" in str(problem)
        assert str(raised.value) == str(problem) and raised.value.reopen
        assert store.file_rows() == {} and store.integrity_check() == "ok"
    assert database_error(ValueError("not a database error")) is None


def test_schema_1_indexes_are_upgraded_in_place(tmp_path: Path) -> None:
    import apsw

    from memsync.store.sqlite_store import MIGRATIONS

    conn = apsw.Connection(str(tmp_path / "old.sqlite"))
    conn.execute(MIGRATIONS[0].sql)
    conn.execute("PRAGMA user_version=1")
    conn.execute("INSERT INTO skipped(path, reason, at) VALUES('big.md', 'too large', 1)")
    conn.close()
    with SqliteStore(tmp_path / "old.sqlite") as store:
        assert store.skip_rows()["big.md"].mtime_ns is None
        assert store.meta()["schema_version"] == str(SCHEMA_VERSION)


def test_a_reader_opening_an_index_being_created_never_breaks_its_creation(
    tmp_path: Path,
) -> None:
    """A query run while the first `memsync index` creates the file used to apply the same
    migration twice ("table meta already exists"): each step is checked inside its transaction."""
    import threading

    for trial in range(20):
        db = tmp_path / f"i{trial}.sqlite"
        stop = threading.Event()

        def reader(db: Path = db, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                try:
                    with SqliteStore(db, create=False) as store:
                        store.counts()
                except StoreError:
                    pass  # not created yet

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            with SqliteStore(db, create=True) as store:
                assert store.counts()["files"] == 0
        finally:
            stop.set()
            thread.join()


def test_the_writer_draws_a_new_chunks_version_with_each_change_of_the_chunks(
    tmp_path: Path,
) -> None:
    """In the transaction of each change to the chunks or their vectors, and of no other write:
    what every connection reads alike, where PRAGMA data_version is each one's own."""
    key = ModelKey("test", "m", "")
    with SqliteStore(tmp_path / "i.sqlite") as store:
        seen = [store.meta()["chunks_version"]]

        def drawn() -> bool:
            now = store.meta()["chunks_version"]
            new = now not in seen
            seen.append(now)
            return new

        store.set_model(key, 8)
        assert drawn()
        store.replace_file(FileRow("a.md", "x", 1, 1), [NewChunk(1, 1, "h", "a", "", "a")])
        assert drawn()
        [chunk_id] = store.chunks(range(1, 10))
        store.store_embeddings(key, [(chunk_id, "h", np.eye(8, dtype="<f4")[0].tobytes())], 8)
        assert drawn()
        store.move_file("a.md", FileRow("b.md", "x", 1, 1), "")
        assert drawn()
        store.remove_file("b.md")
        assert drawn()
        store.mark_synced()
        store.update_skips(replace_all=True)
        store.touch_file(FileRow("c.md", "x", 2, 2))
        assert not drawn()


def test_readers_of_an_index_without_a_chunks_version_keep_a_copy_each_and_stay_fresh(
    tmp_path: Path,
) -> None:
    """An index of the schema before the chunks version: each long-lived connection keeps its
    own mean vectors (their data_version is their own), writes none, and sees the writer's."""
    from tests.conftest import set_back

    db = tmp_path / "i.sqlite"
    key = ModelKey("test", "m", "")
    e = np.eye(8, dtype="<f4")

    def add(store: SqliteStore, path: str, vector: np.ndarray) -> int:
        store.replace_file(FileRow(path, "x", 1, 1), [NewChunk(1, 1, path, path, "", path)])
        [chunk_id] = [i for i, row in store.chunks(range(1, 100)).items() if row.path == path]
        store.store_embeddings(key, [(chunk_id, path, vector.tobytes())], 8)
        return chunk_id

    with SqliteStore(db) as writer:
        writer.set_model(key, 8)
        first = add(writer, "a.md", e[0])
    set_back(db, next(step.schema for step in MIGRATIONS if step.name == "chunks version") - 1)
    one, two = (SqliteStore(db, create=False, vectors_in_memory=True) for _ in range(2))
    with one, two:
        assert one.vector_search(e[0], 1)[0][0] == two.vector_search(e[0], 1)[0][0] == first
        assert one._kept_means() is not two._kept_means()
        assert "chunks_version" not in one.meta()
        with SqliteStore(db) as writer:  # this release's writer: the step, then a new note
            later = add(writer, "b.md", e[5])
        for reader in (one, two):
            assert reader.vector_search(e[5], 1)[0][0] == later
        assert one._kept_means() is not two._kept_means()


def test_vectors_kept_in_memory_score_a_chunk_by_its_nearest_window(tmp_path: Path) -> None:
    e = np.eye(8, dtype="<f4")
    key = ModelKey("test", "m", "")
    with SqliteStore(tmp_path / "i.sqlite", create=True, vectors_in_memory=True) as store:
        store.set_model(key, 8)
        store.replace_file(
            FileRow("a.md", "x", 1, 1),
            [NewChunk(1, 3, "h0", "a\nb\nc", "", "a b c"), NewChunk(4, 4, "h1", "d", "", "d")],
        )
        chat_id, other_id = sorted(store.chunks(range(1, 100)))
        items = [(chat_id, "h0", e[:3].tobytes()), (other_id, "h1", e[3].tobytes())]
        store.store_embeddings(key, items, 8)
        assert [i for i, _ in store.vector_search(e[1], 5)] == [chat_id, other_id]
        only = NoteFilter(paths=("a.md",))
        assert store.vector_search(e[3], 1, only) == [(other_id, pytest.approx(0.0, abs=1e-6))]
        assert store.sample_vectors(512).windows.shape == (4, 8)  # every window of each chunk


def _chat_index_of_schema(
    tmp_path: Path, embedder: HashEmbedder, version: int
) -> tuple[Path, Path, str]:
    """(vault, index, the note's text): a chat note indexed, its index set back to schema
    `version` (< 7, which added chunks.windows, 8 chunks.script and 9 links; < 6, chunks.overlap),
    chunked by the rules before `spans`."""
    from memsync.sync.syncer import INDEX_RULES

    root = tmp_path / "vault"
    text = "# Chat\n\n" + "".join(f"- **A:** line {i} about x{i}\n" for i in range(60))
    write(root, "chat.md", text)
    db = tmp_path / "old.sqlite"
    with SqliteStore(db, create=True) as store:
        index_vault(store, root, 1 << 20, embedder)
        store.conn.execute("DROP TABLE held_links; DROP TABLE held_names")
        store.conn.execute("DROP TABLE links; DROP TABLE names")
        store.conn.execute("ALTER TABLE chunks DROP COLUMN script")
        store.conn.execute("ALTER TABLE chunks DROP COLUMN windows")
        if version < 6:
            store.conn.execute("ALTER TABLE chunks DROP COLUMN overlap")
        store.conn.execute(f"PRAGMA user_version={version}")
        old_rules = INDEX_RULES.replace(" spans", "")
        store.conn.execute("UPDATE meta SET value = ? WHERE key = 'chunker'", (old_rules,))
    return root, db, text


def test_an_index_of_one_vector_per_chunk_is_embedded_again_as_windows(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    """Schema 5: the vectors of an index made before windows are dropped, and `index` makes
    them again (the chunks' rules changed too, so each note is chunked again)."""
    import apsw

    root, db, text = _chat_index_of_schema(tmp_path, hash_embedder, 4)
    old = apsw.Connection(str(db))  # one vector a chunk, as before windows
    old.execute("UPDATE chunks SET embedding = substr(embedding, 1, 256)")
    old.execute("DELETE FROM embedding_cache")  # it held the one vector of each chunk's text
    old.close()
    with SqliteStore(db) as store:
        assert store.pending_count() == store.counts()["chunks"] > 0
        assert store.vector_search(hash_embedder.embed_query("line 3"), 3) == []
        report = index_vault(store, root, 1 << 20, hash_embedder)
        assert report.embedded == store.counts()["chunks"] and store.pending_count() == 0
        chunk = store.chunks([max(store.chunks(range(1, 100)))])
        [row] = chunk.values()
        last = chunk_text(text)[-1]
        assert last.text == row.text and last.overlap > 0
        window = embed_inputs("Chat", row.text, overlap=last.overlap)[-1]  # its last window
        [(best, distance)] = store.vector_search(hash_embedder.embed_documents([window])[0], 1)
        assert best == row.id and distance == pytest.approx(0.0, abs=1e-6)


def test_an_index_whose_chunks_embedded_their_overlap_is_chunked_and_embedded_again(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    """Schema 6 and the `lead` rule: an index of the release before (each chunk's windows began
    with the lines the chunk before had embedded) is upgraded by `index`: chunked again, each
    chunk's overlap recorded, and a later chunk's vectors are those of its own lines' windows."""
    from memsync.sync.syncer import INDEX_RULES

    root, db, text = _chat_index_of_schema(tmp_path, hash_embedder, 5)
    with SqliteStore(db) as store:
        old_rules = INDEX_RULES.replace(" lead1", "").replace(" spans", "")
        store.conn.execute("UPDATE meta SET value = ? WHERE key = 'chunker'", (old_rules,))
    chunks = chunk_text(text)
    with SqliteStore(db) as store:
        index_vault(store, root, 1 << 20, hash_embedder)
        pending = store.pending_chunks(100, any_chunk=True)
        assert [(c.text, c.overlap) for c in pending] == [(c.text, c.overlap) for c in chunks]
        last = chunks[-1]
        assert last.overlap > 1
        [row] = store.chunks([pending[-1].id]).values()
        own = embed_inputs(last.context, last.text, overlap=last.overlap)
        assert len(row.embedding or b"") == len(own) * 64 * 4
        [(best, distance)] = store.vector_search(hash_embedder.embed_documents(own[:1])[0], 1)
        assert best == row.id and distance == pytest.approx(0.0, abs=1e-6)


def test_a_query_says_how_many_chunks_wait_for_their_vectors(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    """An index upgraded by a query's refresh (or a watcher behind) finds some chunks by
    keyword only: the answer says so instead of ranking silently without them."""
    from memsync.search.options import Options
    from memsync.search.pipeline import search

    root = tmp_path / "vault"
    for i in range(3):
        write(root, f"n{i}.md", f"# Note {i}\n\nalpha beta {i}\n")
    with SqliteStore(tmp_path / "i.sqlite", create=True) as store:
        index_vault(store, root, 1 << 20, hash_embedder)
        assert search(store, "alpha", Options(), hash_embedder).notices == []
        store.conn.execute("UPDATE chunks SET embedding = NULL WHERE path = 'n1.md'")
        notices = search(store, "alpha", Options(), hash_embedder).notices
        assert notices == [
            "1 chunks have no vector yet and are found by keyword only: "
            "memsync index (or a running watch) embeds them"
        ]


def test_a_chunk_waiting_for_its_vector_is_found_by_its_words_in_the_default_mode(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    """A note saved since the last embedding (a query's refresh, a watcher still embedding):
    its words alone score it, as the notice says, instead of a keyword leg weighted 0.3 that
    kept it under min_score (`no results` for a note found at 0.90 before one line was added)."""
    from memsync.search.options import Options
    from memsync.search.pipeline import search

    root = tmp_path / "vault"
    write(root, "vpn.md", "# VPN\n\nReset the wireguard keys with wg genkey.\n")
    write(root, "other.md", "# Other\n\nNothing about that here.\n")
    with SqliteStore(tmp_path / "i.sqlite", create=True) as store:
        index_vault(store, root, 1 << 20, hash_embedder)
        store.conn.execute("UPDATE chunks SET embedding = NULL WHERE path = 'vpn.md'")
        answer = search(store, "reset wireguard keys", Options(), hash_embedder)
        [found] = [hit for hit in answer.results if hit.path == "vpn.md"]
        assert found.vector_score is None and found.score == pytest.approx(found.text_score)


def test_a_chunk_found_by_keyword_only_still_gets_its_cosine(tmp_path: Path) -> None:
    """Beyond the vector leg's pool a chunk has vectors all the same: fusion reads its cosine
    (from its stored windows), not 0."""
    from memsync.search.options import Options
    from memsync.search.pipeline import search

    e = np.eye(8, dtype="<f4")

    class Fixed(HashEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            return e[0]

    embedder = Fixed(8)
    key = embedder.key
    with SqliteStore(tmp_path / "i.sqlite", create=True) as store:
        store.set_model(key, 8)
        chunks = [
            NewChunk(i + 1, i + 1, f"f{i}", f"filler {i}", "", f"filler {i}") for i in range(30)
        ]
        chunks.append(NewChunk(40, 40, "z", "zebra crossing", "", "zebra crossing"))
        store.replace_file(FileRow("a.md", "x", 1, 1), chunks)
        ids = sorted(store.chunks(range(1, 100)))
        near = [(0.9 * e[0] + 0.1 * e[1 + i % 7]).astype("<f4") for i in range(30)]
        target = (0.5 * e[0] + 0.866 * e[2]).astype("<f4")
        items = [(i, c.hash, v.tobytes()) for i, c, v in zip(ids, chunks, [*near, target])]
        store.store_embeddings(key, items, 8)
        [hit] = [
            h
            for h in search(
                store, "zebra", Options(limit=2, min_score=0, explain=True), embedder
            ).results
            if h.path == "a.md" and h.start_line == 40
        ]
        assert hit.vector_score is not None and hit.explain is not None
        assert hit.explain["cosine"] == pytest.approx(0.5, abs=1e-3)


def test_where_the_glosses_found_notes_a_note_they_did_not_find_lacks_keyword_evidence(
    tmp_path: Path,
) -> None:
    """`公式` in English notes: its gloss `formula` finds the page on formulas, so a page the
    glosses did not find is scored as an English question scores it (0.7 of its vector score),
    not by its vectors alone as when no word could have matched it; it outranked the page on
    formulas on Obsidian's help pages by a vector near every short question."""
    from memsync.search.options import Options
    from memsync.search.pipeline import search

    e = np.eye(8, dtype="<f4")

    class Fixed(HashEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            return e[0]

    embedder = Fixed(8)
    with SqliteStore(tmp_path / "i.sqlite", create=True) as store:
        store.set_model(embedder.key, 8)
        texts = [*(f"filler {i}" for i in range(30)), "community directory", "formulas compute"]
        lines = [*range(1, 31), 40, 50]
        chunks = [NewChunk(n, n, f"h{n}", text, "", text) for n, text in zip(lines, texts)]
        store.replace_file(FileRow("a.md", "x", 1, 1), chunks)
        ids = sorted(store.chunks(range(1, 100)))
        cosines = [0.1 + 0.01 * i for i in range(30)] + [0.7, 0.6]
        vectors = [(c * e[0] + (1 - c * c) ** 0.5 * e[1 + i % 7]) for i, c in enumerate(cosines)]
        store.store_embeddings(
            embedder.key,
            [(i, c.hash, v.astype("<f4").tobytes()) for i, c, v in zip(ids, chunks, vectors)],
            8,
        )
        hits = search(store, "公式", Options(limit=2, min_score=0, explain=True), embedder).results
    assert [h.start_line for h in hits] == [50, 40]
    assert hits[0].explain is not None and hits[0].explain["glossed"] is True
    unmatched = hits[1]  # by its vectors alone it was first: 0.66 against 0.60
    assert unmatched.text_score is None and unmatched.vector_score is not None
    assert unmatched.explain is not None
    assert unmatched.explain["fused"] == pytest.approx(0.7 * unmatched.vector_score, abs=1e-4)


def test_a_batch_of_notes_replaces_more_old_chunks_than_one_statement_may_name(
    tmp_path: Path,
) -> None:
    """A batch's old chunks are deleted note by note: SQLite takes at most so many parameters
    in one statement (32,766 by default; 100 here), and a batch may hold more old chunks."""
    import apsw

    def note(path: str, count: int, word: str) -> tuple[FileRow, list[NewChunk]]:
        chunks = [
            NewChunk(i, i, f"{path}:{word}:{i}", f"{word} {i}", "", f"{word} {i}")
            for i in range(count)
        ]
        return FileRow(path, word, 1, 1), chunks

    with SqliteStore(tmp_path / "index.sqlite", create=True) as store:
        store.conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER, 100)
        paths = [f"n{i}.md" for i in range(3)]
        for path in paths:
            store.replace_file(*note(path, 60, "old"))
        store.replace_files([NoteWrite(*note(path, 2, "new")) for path in paths])
        assert store.counts()["chunks"] == 6
        assert store.keyword_search(["old"], False, 10)[0] == []


def test_a_moved_folder_s_chunks_move_in_the_keyword_index_too(
    tmp_path: Path, hash_embedder: HashEmbedder
) -> None:
    """chunks_fts keeps each chunk's path beside its text: a rename updates it by rowid (its
    path column is unindexed: by path, every row of it was read for each note moved)."""
    root = tmp_path / "vault"
    for i in range(3):
        write(root, f"notes/n{i}.md", f"# Note {i}\n\n" + f"paragraph {i} of words\n\n" * 60)
    with SqliteStore(tmp_path / "i.sqlite") as store:
        index_vault(store, root, 1 << 20, hash_embedder)
        (root / "notes").rename(root / "archive")
        assert index_vault(store, root, 1 << 20, hash_embedder).moved == 3
        paths = dict(store.conn.execute("SELECT rowid, path FROM chunks_fts").fetchall())
        chunks = dict(store.conn.execute("SELECT id, path FROM chunks").fetchall())
    assert paths == chunks and len(chunks) > 3
    assert all(path.startswith("archive/") for path in paths.values())


@pytest.mark.parametrize("version", [SCHEMA_VERSION - 1, 1])
def test_an_older_index_this_user_may_only_read_answers_from_it_as_it_is_and_is_never_written(
    world_readable: Path, version: int
) -> None:
    """query, get, status and an agent's search read an older memsync's index as it is, say it
    is behind, and change no byte of it; its writer's `index` then migrates it."""
    import json

    from memsync.agent.server import MemoryServer
    from memsync.config import load_config
    from memsync.memory import Memory, index, search_options
    from tests.conftest import as_nobody

    vault, db = older_index(world_readable, version)
    config = load_config(db=str(db), provider="none")
    db.chmod(0o444)
    db.parent.chmod(0o555)
    before = {p.name: p.read_bytes() for p in db.parent.iterdir()}

    def read() -> str:
        with Memory.open(config) as memory:
            found = memory.search("redis port", search_options(config, mode="keyword"))
            tagged = memory.search("kafka", search_options(config, mode="keyword", tags=["ops"]))
            status = memory.status()
            line = memory.read("redis.md", 3, 3).text
        server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, ())
        try:
            agent = server.memory_search(query="redis port", mode="keyword")
        finally:
            server.close()
        return json.dumps(
            {
                "paths": [hit.path for hit in found.results],
                "tagged": [hit.path for hit in tagged.results],
                "notices": found.notices,
                "behind": status["schema_behind"],
                "read_only": status["read_only"],
                "line": line,
                "agent": [r["path"] for r in (agent.structured_content or {})["results"]],
            }
        )

    shown = as_nobody(read)
    answer = json.loads(shown) if shown.startswith("{") else shown
    assert isinstance(answer, dict), answer
    assert answer["paths"] == ["redis.md"] and answer["agent"] == ["redis.md"]
    # an index older than tags (schema 3) has none to filter by until its writer indexes it
    assert answer["tagged"] == (["kafka.md"] if version >= 3 else [])
    assert answer["line"].strip() == "The redis service listens on port 6380."
    assert answer["read_only"] is True
    assert f"behind an older memsync's rules (schema {version}" in answer["behind"]
    assert answer["behind"] in answer["notices"]
    assert {p.name: p.read_bytes() for p in db.parent.iterdir()} == before
    db.parent.chmod(0o755)
    db.chmod(0o644)
    index(config, vault)  # the writer, under its lock
    with SqliteStore(db, create=False) as store:
        assert store.schema == SCHEMA_VERSION and store.behind == ""
        assert "windows" in [r[1] for r in store.conn.execute("PRAGMA table_info(chunks)")]
