from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from memsync.chunking import MAX_TOKENS, count_tokens, embed_inputs, windows
from memsync.store.locate import Location
from memsync.store.protocols import NoteWrite
from memsync.store.protocols import StoreWriter as Store
from memsync.sync import syncer
from memsync.sync.embedding import embed_pending
from memsync.sync.syncer import Report, Syncer, index_vault, match_moves, plan
from memsync.vault import FileStat
from tests.conftest import HashEmbedder, write

MB = 1 << 20


def test_plan_reads_only_new_or_changed_stats_and_lists_removed() -> None:
    disk = {
        "same.md": FileStat("same.md", 10, 5),
        "touched.md": FileStat("touched.md", 20, 5),
        "new.md": FileStat("new.md", 30, 5),
    }
    index = {"same.md": (10, 5), "touched.md": (11, 5), "gone.md": (12, 5)}
    result = plan(disk, index)
    assert result.to_read == ["new.md", "touched.md"]
    assert result.removed == ["gone.md"]
    assert result.unchanged == 1


def test_match_moves_pairs_identical_bytes_once() -> None:
    moves = match_moves({"b/new.md": "h", "c/other.md": "h", "x.md": "z"}, {"a/old.md": "h"})
    assert moves == {"b/new.md": "a/old.md"}


def other_query(store: Store) -> object:
    """A query vector of the index's size: every stored vector is among its 1,000 nearest."""
    import numpy as np

    return np.ones(store.dims() or 1, dtype=np.float32)


def _index(store: Store, root: Path, embedder: HashEmbedder) -> Report:
    return index_vault(store, root, MB, embedder)


def _vectors_each(store: Store) -> dict[int, int]:
    """How many vectors each chunk should hold: one per embedding input."""
    return {
        c.id: len(embed_inputs(c.context, c.text, c.whole, c.overlap))
        for c in store.pending_chunks(store.counts()["chunks"], any_chunk=True)
    }


def _notes(root: Path, n: int = 5) -> None:
    for i in range(n):
        body = "\n\n".join(f"Paragraph {j} of note {i} about topic {i * j}." for j in range(30))
        write(root, f"notes/n{i}.md", f"# Note {i}\n\n{body}\n")


@pytest.fixture
def indexed(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> Iterator[tuple[Path, Store]]:
    """Two notes, indexed with the hash model: the start of most tests below."""
    root = tmp_path / "vault"
    _notes(root, 2)
    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        yield root, store


def test_unchanged_files_are_not_read_and_touch_is_not_rechunked(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "vault"
    _notes(root)
    with location.open(create=True) as store:
        first = _index(store, root, hash_embedder)
        assert first.added == 5 and first.embedded == first.chunks_written > 0

        import memsync.sync.syncer as sync_module

        reads: list[str] = []
        real_read = sync_module.read_note
        monkeypatch.setattr(
            sync_module, "read_note", lambda r, p, m: reads.append(p) or real_read(r, p, m)
        )
        again = _index(store, root, hash_embedder)
        assert reads == [] and again.unchanged == 5 and again.chunks_written == 0

        os.utime(root / "notes/n1.md", ns=(1, 1))
        touched = _index(store, root, hash_embedder)
        assert reads == ["notes/n1.md"]
        assert touched.touched == 1 and touched.chunks_written == 0 and touched.embedded == 0


def test_an_edit_reembeds_only_the_chunks_whose_text_changed(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    _notes(root)
    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        hash_embedder.calls.clear()
        path = root / "notes/n2.md"
        path.write_text(
            path.read_text().replace("Paragraph 20 of note 2", "Paragraph twenty, edited,")
        )
        report = _index(store, root, hash_embedder)
        assert report.changed == 1 and report.added == 0
        # the edited chunk (and the one that repeats its lines), window by window: no more text
        assert 1 <= report.embedded <= 2
        assert any("twenty" in text for text in hash_embedder.calls)
        sent = sum(count_tokens(text) for text in hash_embedder.calls)
        assert sent <= 2 * (MAX_TOKENS + 20 * len(hash_embedder.calls))


def test_delete_removes_rows_from_every_table(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder
) -> None:
    root, store = indexed
    (root / "notes/n0.md").unlink()
    report = _index(store, root, hash_embedder)
    assert report.removed == 1
    assert [path for path, *_ in store.listing()] == ["notes/n1.md"]
    hits, _ = store.keyword_search(["paragraph"], False, 1000)
    vectors = store.vector_search(hash_embedder.embed_query("note 0"), 1000)
    for found in (hits, vectors):
        paths = {row.path for row in store.chunks([i for i, _ in found]).values()}
        assert paths == {"notes/n1.md"}
        assert len(found) == store.counts()["chunks"]


def test_rename_and_folder_move_reuse_embeddings(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    _notes(root, 3)
    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        hash_embedder.calls.clear()
        (root / "notes/n0.md").rename(root / "notes/renamed.md")
        (root / "notes").rename(root / "archive")
        report = _index(store, root, hash_embedder)
        assert report.moved == 3 and report.added == 0 and report.removed == 0
        assert hash_embedder.calls == []
        assert sorted(store.file_rows()) == ["archive/n1.md", "archive/n2.md", "archive/renamed.md"]
        assert store.counts()["pending"] == 0


def test_a_moved_note_takes_the_date_of_its_new_path(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    from memsync.filters import NoteFilter

    root = tmp_path / "vault"
    write(root, "daily/2026-11-02.md", "# log\n\nheron standup notes\n")
    write(root, "inbox/june.md", "# june\n\nkestrel planning notes\n")

    def dated(since: str, until: str) -> list[str]:
        only = NoteFilter(since=since, until=until)
        hits, _ = store.keyword_search(["notes"], False, 10, only)
        return sorted(store.chunks([i for i, _ in hits])[i].path for i, _ in hits)

    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        assert dated("2026-11-02", "2026-11-02") == ["daily/2026-11-02.md"]
        hash_embedder.calls.clear()
        os.utime(root / "daily/2026-11-02.md", (1e9, 1e9))  # mtime day 2001-09-09
        os.utime(root / "inbox/june.md", (1e9, 1e9))
        (root / "daily/2026-11-02.md").rename(root / "archive.md")
        (root / "inbox/june.md").rename(root / "daily/2024-06-01.md")
        report = _index(store, root, hash_embedder)
        assert report.moved == 2 and hash_embedder.calls == []
        assert dated("2026-11-02", "2026-11-02") == []
        assert dated("2024-06-01", "2024-06-30") == ["daily/2024-06-01.md"]
        assert dated("2001-09-01", "2001-09-30") == ["archive.md"]


def test_case_only_rename(tmp_path: Path, location: Location, hash_embedder: HashEmbedder) -> None:
    root = tmp_path / "vault"
    write(root, "Note.md", "# Note\n\nsome text\n")
    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        os.rename(root / "Note.md", root / "note.md")
        report = _index(store, root, hash_embedder)
        assert report.moved == 1
        assert list(store.file_rows()) == ["note.md"]


def test_bad_files_are_skipped_with_reasons_and_the_rest_is_indexed(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    write(root, "good.md", "# Good\n\nfine\n")
    write(root, "empty.md", "")
    (root / "binary.md").write_bytes(b"\x00\x01\x02binary")
    (root / "latin1.md").write_bytes("na\xefve caf\xe9".encode("latin-1"))
    with open(root / "huge.md", "wb") as handle:
        handle.truncate(3 * MB)
    with location.open(create=True) as store:
        report = index_vault(store, root, 2 * MB, hash_embedder)
        reasons = dict(report.skipped)
        assert set(reasons) == {"binary.md", "huge.md"}
        assert "binary" in reasons["binary.md"] and "too large" in reasons["huge.md"]
        assert [p for p, _ in report.warnings] == ["latin1.md"]
        assert sorted(store.file_rows()) == ["empty.md", "good.md", "latin1.md"]
        assert dict(store.skipped()) == reasons


def test_a_note_that_becomes_unreadable_leaves_the_index(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    write(root, "a.md", "# A\n\ntext\n")
    with location.open(create=True) as store:
        _index(store, root, hash_embedder)
        (root / "a.md").write_bytes(b"\x00binary now")
        report = _index(store, root, hash_embedder)
        assert report.removed == 1 and store.file_rows() == {}
        assert store.skipped()[0][0] == "a.md"


def test_a_short_note_of_one_chunk_gets_a_vector_of_its_whole_from_its_stored_row(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    """The chunker marks a note's only chunk (its hash counts the whole as one more input); the
    vectors are made later from the stored rows, where the store says which chunk is its note's
    only one. A long note's chunks get their windows alone."""
    root = tmp_path / "vault"
    _notes(root, 1)
    facts = "\n".join(f"- fact {i}: {'detail ' * 12}" for i in range(8))
    write(root, "people/li.md", f"# Li\n\n{facts}\n")
    with location.open(create=True) as store:
        index_vault(store, root, MB, None)
        embed_pending(store, hash_embedder)
        rows = store.chunks([i for i, _ in store.vector_search(other_query(store), 1000)])
        person = [r for r in rows.values() if r.path == "people/li.md"]
        assert len(person) == 1 and len(windows(person[0].text)) > 1
        expected = _vectors_each(store)
        assert expected[person[0].id] == len(windows(person[0].text)) + 1
        for r in rows.values():
            assert len(r.embedding or b"") == expected[r.id] * 64 * 4, r.path
        assert sum(r.path == "notes/n0.md" for r in rows.values()) > 1


def test_keyword_only_run_leaves_chunks_pending_until_a_model_runs(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    _notes(root, 2)
    with location.open(create=True) as store:
        report = index_vault(store, root, MB, None)
        assert report.pending == store.counts()["chunks"] > 0
        later = embed_pending(store, hash_embedder)
        assert (
            later.pending == 0
            and later.embedded == report.pending
            and store.model_key() == hash_embedder.key
        )


def test_changing_the_model_reembeds_and_never_mixes_vectors(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder
) -> None:
    root, store = indexed
    other = HashEmbedder(dims=32)
    other.model = "hash-32"
    report = _index(store, root, other)
    assert report.embedded == store.counts()["chunks"]
    assert store.model_key() == other.key and store.dims() == 32
    rows = store.chunks([i for i, _ in store.vector_search(other_query(store), 1000)])
    expected = _vectors_each(store)
    assert all(len(r.embedding or b"") == expected[r.id] * 32 * 4 for r in rows.values())


def test_sync_paths_applies_only_the_named_paths(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder
) -> None:
    root, store = indexed
    write(root, "notes/new.md", "# New\n\nfresh\n")
    write(root, "notes/unnamed.md", "# Not named\n")
    report = Syncer(store, root, MB).sync_paths(["notes/new.md", ".obsidian/x.md"])
    assert report.added == 1
    assert "notes/unnamed.md" not in store.file_rows()


def test_a_move_named_by_its_new_path_alone_is_a_move(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder
) -> None:
    """watchdog pairs a move only within one watch: between two, the create comes half a second
    before the delete, and the note was listed under both paths meanwhile."""
    root, store = indexed
    os.makedirs(root / "archive")
    os.rename(root / "notes/n0.md", root / "archive/n0.md")
    shutil.copy2(
        root / "notes/n1.md", root / "archive/copy.md"
    )  # same stats, the first still there
    report = Syncer(store, root, MB).sync_paths(["archive/n0.md", "archive/copy.md"])
    assert (report.moved, report.added, report.removed) == (1, 1, 0)
    assert sorted(store.file_rows()) == ["archive/copy.md", "archive/n0.md", "notes/n1.md"]
    late = Syncer(store, root, MB).sync_paths(["notes/n0.md"])  # the delete, when it comes
    assert (late.moved, late.added, late.removed) == (0, 0, 0)


def test_a_vanished_vault_folder_leaves_the_index_alone(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder, tmp_path: Path
) -> None:
    from memsync.errors import VaultError

    root, store = indexed
    root.rename(tmp_path / "unmounted")
    with pytest.raises(VaultError, match="left as it is"):
        Syncer(store, root, MB).sync_all()
    assert len(store.file_rows()) == 2


def test_new_chunking_rules_rechunk_every_note_and_keep_unchanged_vectors(
    indexed: tuple[Path, Store], hash_embedder: HashEmbedder
) -> None:
    root, store = indexed
    assert store.meta()["chunker"].startswith("cdc-")
    store.mark_synced(chunker="an older chunker")
    hash_embedder.calls.clear()
    report = _index(store, root, hash_embedder)
    assert report.changed == 2 and report.chunks_written > 0
    assert hash_embedder.calls == []  # same chunks, vectors from the cache
    again = _index(store, root, hash_embedder)
    assert again.unchanged == 2 and again.changed == 0


def test_a_non_utf8_file_name_is_skipped_and_every_other_note_indexed(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder
) -> None:
    root = tmp_path / "vault"
    _notes(root, 3)
    (root / "notes" / os.fsdecode(b"bad\xffname.md")).write_text("# Bad name\n")
    with location.open(create=True) as store:
        report = _index(store, root, hash_embedder)
        assert report.added == 3
        assert dict(report.skipped) == {
            "notes/bad\\xffname.md": "file name is not valid UTF-8: rename the file to index it"
        }
        assert dict(store.skipped()) == dict(report.skipped)
        again = Syncer(store, root, MB).sync_paths(
            ["notes/n0.md", "notes/" + os.fsdecode(b"bad\xffname.md")]
        )
        assert [p for p, _ in again.skipped] == ["notes/bad\\xffname.md"]


def test_a_skipped_file_is_not_read_again_until_it_changes(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memsync.sync.syncer as sync_module
    from memsync.status import gather

    root = tmp_path / "vault"
    write(root, "good.md", "# Good\n")
    (root / "binary.md").write_bytes(b"\x00" * 1000)
    with location.open(create=True) as store:
        first = _index(store, root, hash_embedder)
        assert [p for p, _ in first.skipped] == ["binary.md"]
        reads: list[str] = []
        real_read = sync_module.read_note
        monkeypatch.setattr(
            sync_module, "read_note", lambda r, p, m: reads.append(p) or real_read(r, p, m)
        )
        again = _index(store, root, hash_embedder)
        assert reads == [] and [p for p, _ in again.skipped] == ["binary.md"]
        events = Syncer(store, root, MB).sync_paths(["binary.md"])
        assert reads == [] and [p for p, _ in events.skipped] == ["binary.md"]
        facts = gather(location)
        assert facts["disk"]["new"] == 0 and facts["disk"]["skipped"] == 1
        assert facts["text_up_to_date"]
        (root / "binary.md").write_text("# Now text\n")
        fixed = _index(store, root, hash_embedder)
        assert reads == ["binary.md"] and fixed.added == 1 and store.skipped() == []


def test_a_first_run_killed_midway_resumes_without_rechunking_what_it_wrote(
    tmp_path: Path, location: Location, hash_embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "vault"
    _notes(root, 4)
    written: list[str] = []

    monkeypatch.setattr(syncer, "BATCH_NOTES", 2)
    with location.open(create=True) as store:
        real_replace = store.replace_files

        def crash_after_two(notes: Sequence[NoteWrite]) -> None:
            if len(written) == 2:
                raise KeyboardInterrupt  # as if killed: nothing after this point runs
            real_replace(notes)
            written.extend(note.row.path for note in notes)

        monkeypatch.setattr(store, "replace_files", crash_after_two)
        with pytest.raises(KeyboardInterrupt):
            index_vault(store, root, MB, None)
        monkeypatch.setattr(store, "replace_files", real_replace)
        assert store.meta()["vault_path"] == str(root)
        report = _index(store, root, hash_embedder)
        assert report.changed == 0 and report.unchanged == 2 and report.added == 2


def test_a_model_that_changes_size_is_an_error_unless_indexing_adopts_it(
    indexed: tuple[Path, Store],
) -> None:
    from memsync.errors import EmbeddingResponseError

    root, store = indexed
    smaller = HashEmbedder(dims=32)  # the same name, another size
    write(root, "notes/new.md", "# New\n\nfresh words\n")
    Syncer(store, root, MB).sync_all()
    with pytest.raises(EmbeddingResponseError, match="now returns 32-dimension vectors"):
        embed_pending(store, smaller)
    assert store.dims() == 64 and store.pending_count() > 0
    report = _index(store, root, smaller)  # `memsync index`: every vector again, at 32
    assert store.dims() == 32 and report.pending == 0
    rows = store.chunks([i for i, _ in store.vector_search(other_query(store), 1000)])
    expected = _vectors_each(store)
    assert all(len(r.embedding or b"") == expected[r.id] * 32 * 4 for r in rows.values())
