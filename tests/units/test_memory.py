"""The library face (memory.py): a reading command's index, search options, the refresh before
answering, reads, trees, status and an agent's write, called as the CLI and the MCP server call
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config import load_config
from memsync.errors import ArgumentError, IndexNotFound
from memsync.memory import Memory, behind_notice, lists_vaults, refresh_text, search_options
from memsync.store.locate import SqliteLocation
from memsync.store.sqlite_store import SqliteStore
from tests.conftest import VaultIndexer, write


@pytest.fixture
def keyword_vault(tmp_path: Path, indexed_vault: VaultIndexer) -> Path:
    """Two notes indexed keyword-only into the vault's default index."""
    notes = {
        "tech/redis.md": "# Redis\n\nThe staging Redis listens on port 6380.\n",
        "ops/kafka.md": "---\ntags: [ops]\n---\n# Kafka\n\nkafka brokers\n",
    }
    return indexed_vault(tmp_path / "notes", notes=notes)


def test_a_reading_command_finds_the_vault_s_index_or_says_there_is_none(
    keyword_vault: Path, tmp_path: Path
) -> None:
    config = load_config(provider="none")
    with Memory.open(config, keyword_vault) as memory:
        assert memory.vault == keyword_vault.resolve()
        assert memory.paths("tech/") == ["tech/redis.md"]
    with pytest.raises(IndexNotFound):
        Memory.open(load_config(db=str(tmp_path / "none.sqlite")))


def test_search_options_take_the_configured_defaults_unless_a_request_overrides_them() -> None:
    config = load_config(limit=7, mode="keyword")
    assert (search_options(config).limit, search_options(config).mode) == (7, "keyword")
    chosen = search_options(config, limit=None, mode="vector")
    assert (chosen.limit, chosen.mode) == (7, "vector")
    with pytest.raises(ArgumentError, match="--since"):
        search_options(config, since="last week")


def test_only_a_postgresql_db_without_a_name_lists_vaults() -> None:
    assert lists_vaults(load_config(db="postgresql://u@h/d"))
    assert not lists_vaults(load_config(db="postgresql://u@h/d", name="notes"))
    assert not lists_vaults(load_config(db="/tmp/i.sqlite"))


def test_a_search_refreshes_the_text_first_and_filters_by_tag(keyword_vault: Path) -> None:
    config = load_config(provider="none")
    write(keyword_vault, "new.md", "# New\n\nthe zeppelin hangar\n")  # not indexed yet
    with Memory.open(config, keyword_vault) as memory:
        found = memory.search("zeppelin", search_options(config, mode="keyword"))
        assert [hit.path for hit in found.results] == ["new.md"] and found.notices == []
        tagged = memory.search("kafka", search_options(config, mode="keyword", tags=["ops"]))
        assert [hit.path for hit in tagged.results] == ["ops/kafka.md"]
        with pytest.raises(ArgumentError, match="the query is empty"):
            memory.search("  ", search_options(config))


def test_read_takes_the_file_on_disk_and_the_indexed_copy_once_it_is_gone(
    keyword_vault: Path,
) -> None:
    config = load_config(provider="none")
    with Memory.open(config, keyword_vault) as memory:
        (keyword_vault / "tech/redis.md").write_text("# Redis\n\nNow on port 6390.\n")
        fresh = memory.read("tech/redis.md", 3, 3)
        assert fresh.text == "Now on port 6390." and not fresh.copy
        (keyword_vault / "tech/redis.md").unlink()
        kept = memory.read("tech/redis.md", 3, 3)
        assert kept.text == "The staging Redis listens on port 6380."
        assert kept.copy.startswith("the indexed copy, indexed at")
        with pytest.raises(ArgumentError, match="no note at gone.md in the index"):
            memory.read("gone.md")


def test_tree_lists_what_is_indexed_under_a_folder_and_refuses_a_glob(keyword_vault: Path) -> None:
    with Memory.open(load_config(provider="none"), keyword_vault) as memory:
        where, rows = memory.tree("tech")
        assert where == "tech" and [row[0] for row in rows] == ["tech/redis.md"]
        assert [row[0] for row in memory.tree()[1]] == ["ops/kafka.md", "tech/redis.md"]
        with pytest.raises(ArgumentError, match="not a glob"):
            memory.tree("tech/*")


def test_an_agent_s_write_is_indexed_before_it_returns_and_only_on_the_vault_s_host(
    keyword_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(provider="none")
    with Memory.open(config, keyword_vault) as memory:
        written = memory.write("- walrus on the roof", "log.md", "append")
        assert written["indexed"] and written["citation"] == "log.md#L1-L1"
        assert memory.status()["files_indexed"] == 3
    # a SQLite index is a file of this machine's, whatever its host is called today (a shared
    # vault on another host is refused: test_origin)
    monkeypatch.setenv("MEMSYNC_HOST", "renamed")
    with Memory.open(config, keyword_vault) as memory:
        memory.check_writable_here()
        assert memory.write("- and a seal", "log.md", "append")["start_line"] == 2


def test_a_query_leaves_an_older_index_to_the_writer_that_holds_its_lock(tmp_path: Path) -> None:
    """While another writer holds the lock (an older memsync's watcher), a query answers from
    the older schema as it is and says so; once the lock is free, its refresh migrates."""
    import apsw

    from memsync.store.lock import FileLock
    from memsync.store.sqlite_store import SCHEMA_VERSION
    from tests.conftest import older_index

    _, db = older_index(tmp_path, 6)
    config = load_config(db=str(db), provider="none")
    options = search_options(config, mode="keyword")

    def schema() -> int:
        conn = apsw.Connection(str(db))
        try:
            return int(list(conn.execute("PRAGMA user_version"))[0][0])
        finally:
            conn.close()

    with FileLock(db, "watch"), Memory.open(config) as memory:
        found = memory.search("redis port", options)
        assert [hit.path for hit in found.results] == ["redis.md"]
        assert any("behind an older memsync's rules (schema 6" in n for n in found.notices)
        assert schema() == 6
    with Memory.open(config) as memory:
        found = memory.search("redis port", options)
        assert [hit.path for hit in found.results] == ["redis.md"] and found.notices == []
    assert schema() == SCHEMA_VERSION


def test_when_the_text_cannot_be_refreshed_the_query_says_results_may_be_stale(
    keyword_vault: Path, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    scratch = SqliteLocation(tmp_path / "scratch.sqlite")
    with SqliteStore(scratch.path) as store:
        blocked = refresh_text(
            store, SqliteLocation(tmp_path / "a-file" / "i.sqlite"), keyword_vault, 1 << 20
        )
        assert "could not check the vault" in blocked and "stale" in blocked
        gone = refresh_text(store, scratch, tmp_path / "missing", 1 << 20)
        assert "could not bring the index up to date" in gone
        assert refresh_text(store, scratch, keyword_vault, 1 << 20) == ""


def test_a_reader_of_a_shared_index_says_how_far_behind_it_is_unless_a_writer_works(
    keyword_vault: Path, tmp_path: Path
) -> None:
    location = SqliteLocation(tmp_path / "i.sqlite")
    with location.open(create=True) as store:
        write(keyword_vault, "new.md", "# New\n")
        assert behind_notice(store, location, keyword_vault).startswith("3 notes changed on disk")
        with location.writer_lock("watch"):
            assert behind_notice(store, location, keyword_vault) == ""


def test_a_vault_is_unindexed_until_its_index_file_exists_a_lock_left_beside_it_aside(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    from memsync.config import default_db_path
    from memsync.memory import unindexed
    from memsync.store.lock import lock_path

    vault = tmp_path / "notes"
    write(vault, "a.md", "# A\n")
    config = load_config()
    lock_path(default_db_path(vault.resolve())).parent.mkdir(parents=True, exist_ok=True)
    lock_path(default_db_path(vault.resolve())).write_text("{}")  # a writer's, released
    assert unindexed(config, vault)
    indexed_vault(vault)
    assert not unindexed(config, vault)
