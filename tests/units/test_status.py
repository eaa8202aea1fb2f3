"""What `memsync status` reports (status.py): counts, drift from the notes on disk, the writer,
the sync's age; gathered from an index, a lock and a stat-only walk, printed by the CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memsync.cli.commands import main
from memsync.config import load_config
from memsync.memory import Memory, search_options
from memsync.output import status_text
from memsync.status import gather, vaults_in
from memsync.store.locate import PostgresLocation, SqliteLocation
from memsync.store.sqlite_store import SqliteStore
from tests.conftest import EmbeddingServer, VaultIndexer, write


def _vault(root: Path) -> Path:
    write(root, "a.md", "# Alpha\n\nThe staging Redis listens on port 6380.\n")
    write(root, "daily/2026-11-01.md", "# 2026-11-01\n\n测试服务器的SSH端口是2222\n")
    return root


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_gather_says_who_writes_and_how_far_the_notes_on_disk_are_from_the_index(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    vault, db = _vault(tmp_path / "notes"), tmp_path / "i.sqlite"
    indexed_vault(vault, db=db)
    location = SqliteLocation(db)
    facts = gather(location)
    assert facts["vault"] == str(vault) and facts["files_indexed"] == 2
    assert facts["disk"]["present"] and facts["text_up_to_date"] and not facts["complete"]
    assert facts["writer"] is None and 0 <= facts["last_sync_age_s"] < 3600
    with location.writer_lock("watch") as lock:
        lock.update(last_event=time.time())
        writer = gather(location)["writer"]
        assert writer["role"] == "watch" and writer["last_event"]
        assert "writer:   memsync watch running (pid " in status_text(gather(location))
    write(vault, "b.md", "# Beta\n")
    with location.open() as store:  # an open store is read, not opened again
        assert gather(location, store)["disk"]["new"] == 1


def test_gather_of_an_index_whose_vault_folder_is_gone_compares_nothing(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    vault, db = _vault(tmp_path / "notes"), tmp_path / "i.sqlite"
    indexed_vault(vault, db=db)
    vault.rename(tmp_path / "moved")
    facts = gather(SqliteLocation(db))
    assert facts["disk"] == {"present": False, "here": True}
    assert not facts["text_up_to_date"] and not facts["complete"]
    assert "state:    the vault folder is not there now" in status_text(facts)


def test_the_vaults_of_a_postgresql_database_are_listed_with_their_counts(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    indexed_vault(_vault(tmp_path / "notes"), db=url, flags=["--name", name])
    listed = {v["name"]: v for v in vaults_in(url)["vaults"]}
    assert listed[name]["files"] == 2 and listed[name]["writer"] is None
    assert listed[name]["vault"] == str(tmp_path / "notes")
    assert PostgresLocation(url, name).holder() is None


def test_status_counts_add_up_and_a_deleted_skipped_file_is_not_up_to_date(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """A skipped link is no note on disk: `2 indexed, 3 notes on disk (4 skipped)` read as if
    notes had gone missing; and a deleted file listed as skipped was `up to date`."""
    vault = _vault(tmp_path / "notes")
    (vault / "binary.md").write_bytes(b"\x00" * 100)
    outside = write(tmp_path, "outside.md", "# Outside\n")
    (vault / "link.md").symlink_to(outside)
    (vault / "loop").symlink_to(vault)
    indexed_vault(vault)
    text = _invoke("status", "--vault", str(vault)).output
    assert (
        "files:    2 indexed, 3 notes on disk (1 skipped), 2 other entries skipped, listed below"
        in text
    )
    facts = json.loads(_invoke("status", "--vault", str(vault), "--json").output)
    assert facts["disk"]["skipped"] == 3 and facts["disk"]["skipped_notes"] == 1
    (vault / "binary.md").unlink()  # still listed as skipped until a sync: not up to date
    text = _invoke("status", "--vault", str(vault)).output
    assert "files:    2 indexed, 2 notes on disk; 2 other entries skipped, listed below" in text
    assert "state:    behind: notes on disk differ from the index (1 removed)" in text
    indexed_vault(vault)
    text = _invoke("status", "--vault", str(vault)).output
    assert "binary.md" not in text and "state:    up to date\n" in text


def test_an_index_made_with_provider_none_says_so_once_and_waits_for_nothing(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    """The user's choice is stated by status, not warned about by each query in the default
    mode; a query asking for vectors only is told why there are none."""
    vault = _vault(tmp_path / "notes")
    indexed_vault(vault)
    text = _invoke("status", "--vault", str(vault)).output
    assert "vectors:  none (indexed without an embedding model: keyword search only)\n" in text
    assert "waiting for embeddings" not in text and "memsync index" not in text
    for mode in ("hybrid", "rrf"):
        asked = _invoke("query", "staging redis", "--vault", str(vault), "--mode", mode, "--json")
        answer = json.loads(asked.stdout)
        assert answer["mode"] == "keyword" and answer["notices"] == [], answer
        assert answer["results"][0]["path"] == "a.md"
        shown = _invoke("query", "staging redis", "--vault", str(vault), "--mode", mode).output
        assert "asked for" not in shown and "note:" not in shown
    vector = json.loads(
        _invoke("query", "redis", "--vault", str(vault), "--mode", "vector", "--json").stdout
    )
    [notice] = vector["notices"]
    assert (
        notice
        == "vector search unavailable: the index has no vectors (indexed without an embedding model)"
    )


def test_status_never_says_up_to_date_when_disk_differs(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    vault = _vault(tmp_path / "notes")
    indexed_vault(vault)
    write(vault, "b.md", "# new note\n")
    (vault / "a.md").write_text("# Alpha\n\nchanged\n")
    facts = json.loads(_invoke("status", "--vault", str(vault), "--json").output)
    assert facts["disk"]["new"] == 1 and facts["disk"]["changed"] == 1
    assert not facts["text_up_to_date"]
    text = _invoke("status", "--vault", str(vault)).output
    assert "up to date" not in text and "1 new, 1 changed" in text


def test_status_after_the_clock_went_back_gives_no_negative_age(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    import sqlite3
    import time

    vault, db = _vault(tmp_path / "notes"), tmp_path / "i.sqlite"
    indexed_vault(vault, db=db)
    with sqlite3.connect(db) as conn:  # synced a few years ahead of this machine's clock
        conn.execute("UPDATE meta SET value = ? WHERE key = 'last_sync'", (time.time() + 1e8,))
    text = _invoke("status", "--db", str(db)).output
    assert "synced:   just now (the clock here is behind the time recorded)\n" in text


def test_status_says_when_an_older_memsync_chunked_the_index(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """After an upgrade whose rules chunk or embed notes differently, the notes still match
    the files rows, but `index` has work to do: status must not call that up to date."""
    import apsw

    vault = _vault(tmp_path / "notes")
    db = tmp_path / "index.sqlite"
    indexed_vault(vault, db=db)
    older = apsw.Connection(str(db))
    older.execute("UPDATE meta SET value = 'cdc-1 cl100k max400' WHERE key = 'chunker'")
    older.close()
    facts = json.loads(_invoke("status", "--db", str(db), "--json").output)
    assert not facts["rules_current"] and not facts["text_up_to_date"]
    text = _invoke("status", "--db", str(db)).output
    assert "state:    behind: indexed by an older memsync's rules" in text
    assert "up to date" not in text
    indexed_vault(vault, db=db)
    facts = json.loads(_invoke("status", "--db", str(db), "--json").output)
    assert facts["rules_current"] and facts["text_up_to_date"]


def test_a_query_and_status_say_a_running_writer_is_embedding_what_waits(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
    indexed_vault: VaultIndexer,
) -> None:
    """Chunks without vectors yet: a query and status name the running watch or serve that
    embeds them; with no writer that embeds (none, or an agent's write), the query says how
    to."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{embedding_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    vault, db = _vault(tmp_path / "notes"), tmp_path / "i.sqlite"
    indexed_vault(vault, db=db, provider="openai")
    config = load_config(db=str(db), provider="openai")
    with SqliteStore(db) as store:
        store.conn.execute("UPDATE chunks SET embedding = NULL WHERE path = 'a.md'")
    location = SqliteLocation(db)
    waiting = "1 chunks have no vector yet and are found by keyword only: "

    def notices() -> list[str]:
        with Memory.open(config) as memory:
            return memory.search("staging redis port", search_options(config)).notices

    def state() -> str:
        return status_text(gather(location)).split("\nstate:    ")[1].split("\n")[0]

    assert notices() == [f"{waiting}memsync index (or a running watch) embeds them"]
    assert state() == "behind: 1 chunks without vectors"
    for role in ("watch", "serve"):
        with location.writer_lock(role):
            assert notices() == [f"{waiting}a running memsync {role} is embedding them"]
            embedding = f"(a running memsync {role} is embedding them)"
            assert state() == f"behind: 1 chunks without vectors {embedding}"
    with location.writer_lock("mcp-write"):
        assert notices() == [f"{waiting}memsync index (or a running watch) embeds them"]
        assert state() == "behind: 1 chunks without vectors"
