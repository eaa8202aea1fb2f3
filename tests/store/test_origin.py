"""An index belongs to the vault it was built from (host and folder): another folder's writer is
refused before it writes, and readers of a shared index never write it, comparing files with it
only on the vault's host. The CLI runs in this process (`watch` and `mcp`, which serve, as real
processes); other hosts are played by MEMSYNC_HOST."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest

from memsync.errors import VaultTaken
from memsync.redact import redact
from memsync.store.origin import HOST_KEY, PATH_KEY, Origin, Owner
from tests.conftest import VaultIndexer, cli, memsync, write


def _notes(root: Path, topic: str) -> Path:
    write(
        root, f"{topic}.md", f"# {topic}\n\nThe {topic} runbook says restart the port forwarder.\n"
    )
    write(root, "shared.md", f"# Shared\n\nnotes about {topic}\n")
    write(root, "extra.md", f"# Extra\n\n{topic} extra\n")
    return root


def _index(
    root: Path, url: str, name: str, host: str = "laptop"
) -> subprocess.CompletedProcess[str]:
    """`memsync index ROOT` keyword-only into vault `name` of the server at `url`, on `host`."""
    return cli("index", str(root), "--db", url, "--name", name, "--provider", "none", host=host)


def _files(url: str, name: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(f'SELECT path FROM "{name}".files ORDER BY path').fetchall()
    return [r[0] for r in rows]


def _meta(url: str, name: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute(f'SELECT key, value FROM "{name}".meta').fetchall())


# -- the rule, pure --------------------------------------------------------------------------


def test_a_new_or_old_index_is_claimed_and_another_folder_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSYNC_HOST", "laptop")
    a, b = Path("/notes/a"), Path("/notes/b")
    local, shared = Owner("one.db"), Owner("db (vault dup)", shared=True, rename="--name")
    assert local.claim({}, a) == {PATH_KEY: "/notes/a", HOST_KEY: "laptop"}
    # made before hosts were recorded: adopts the folder it is given, as before
    assert shared.claim({PATH_KEY: "/notes/b"}, a) == {PATH_KEY: "/notes/a", HOST_KEY: "laptop"}
    mine = {PATH_KEY: "/notes/a", HOST_KEY: "laptop"}
    assert local.claim(mine, a) == {} and shared.claim(mine, a) == {}
    with pytest.raises(VaultTaken, match=r"holds the vault /notes/a on laptop, not /notes/b"):
        local.claim(mine, b)
    with pytest.raises(VaultTaken, match="choose another --name; .* --replace"):
        shared.claim(mine, b)
    renamed = {PATH_KEY: "/notes/a", HOST_KEY: "laptop.local"}
    assert local.claim(renamed, a) == {HOST_KEY: "laptop"}  # a local file follows its path
    with pytest.raises(VaultTaken, match="on laptop.local"):
        shared.claim(renamed, a)  # the same path on another machine is another folder
    moved = Owner("db", shared=True, rename="--name", replace=True)
    assert moved.claim(renamed, b) == {PATH_KEY: "/notes/b", HOST_KEY: "laptop"}


def test_the_vault_is_here_only_on_its_recorded_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSYNC_HOST", "laptop")
    assert Origin("laptop", "/n").here(shared=True)
    assert not Origin("server", "/n").here(shared=True)
    assert Origin(None, "/n").here(shared=False)  # a local index: this machine's file
    assert Origin("old-name.local", "/n").here(shared=False)  # whatever the host is called now
    assert not Origin(None, "/n").here(
        shared=True
    )  # an old shared one: unknown until it is written


# -- SQLite ----------------------------------------------------------------------------------


def test_another_folder_into_one_sqlite_index_is_refused_before_anything_is_written(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    a, b = _notes(tmp_path / "a", "redis"), _notes(tmp_path / "b", "kafka")
    db = tmp_path / "one.db"
    indexed_vault(a, db=db)
    before = db.read_bytes()
    for command in ("index", "watch"):
        run = memsync if command == "watch" else cli
        refused = run(command, str(b), "--db", str(db), "--provider", "none")
        assert refused.returncode == 1
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"holds the vault {a} on laptop, not {b}" in lines[0]
        assert "choose another --db" in lines[0] and "--replace" in lines[0]
    assert db.read_bytes() == before
    found = json.loads(cli("query", "runbook", "--db", str(db), "--json").stdout)
    assert [r["path"] for r in found["results"]][0] == "redis.md"
    moved = cli("index", str(b), "--db", str(db), "--provider", "none", "--replace")
    assert moved.returncode == 0 and "1 new" in moved.stdout and "1 removed" in moved.stdout


# -- PostgreSQL ------------------------------------------------------------------------------


def test_a_taken_postgresql_vault_name_is_refused_for_index_and_watch(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    a, b = (
        _notes(tmp_path / "alice" / "notes", "redis"),
        _notes(tmp_path / "bob" / "notes", "kafka"),
    )
    indexed_vault(a, db=url, flags=["--name", name])
    meta = _meta(url, name)
    assert meta[PATH_KEY] == str(a) and meta[HOST_KEY] == "laptop"
    for command, host in (("index", "laptop"), ("watch", "laptop"), ("index", "desktop")):
        run = memsync if command == "watch" else cli
        refused = run(command, str(b), "--db", url, "--name", name, "--provider", "none", host=host)
        assert refused.returncode == 1, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert f"holds the vault {a} on laptop" in refused.stderr
        assert "choose another --name" in refused.stderr
    # the same folder's path on another machine is another folder too
    elsewhere = _index(a, url, name, "desktop")
    assert elsewhere.returncode == 1 and "on laptop, not" in elsewhere.stderr
    assert _files(url, name) == ["extra.md", "redis.md", "shared.md"]
    assert _meta(url, name) == meta


def test_a_reader_never_writes_a_shared_vault_and_says_when_it_is_behind_on_the_host(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    root = _notes(tmp_path / "notes", "redis")
    indexed_vault(root, db=url, flags=["--name", name])
    indexed = _files(url, name)
    # another machine has a different folder at the vault's path
    (root / "redis.md").unlink()
    write(root, "other.md", "# Other\n\nsomething else entirely, a runbook too\n")
    query = ("query", "runbook", "--db", url, "--name", name, "--mode", "keyword", "--json")
    away = cli(*query, host="desktop")
    assert away.returncode == 0
    result = json.loads(away.stdout)
    assert [r["path"] for r in result["results"]] == ["redis.md"] and result["notices"] == []
    assert _files(url, name) == indexed
    status = json.loads(cli("status", "--db", url, "--name", name, "--json", host="desktop").stdout)
    assert status["disk"] == {"present": False, "here": False} and status["vault_host"] == "laptop"
    # get reads the indexed copy, never the folder that happens to be at the vault's path
    got = cli("get", "redis.md:3", "--db", url, "--name", name, host="desktop")
    assert got.returncode == 0 and "3 | The redis runbook says restart" in got.stdout
    assert "the indexed copy, indexed at" in got.stderr
    theirs = cli("get", "other.md", "--db", url, "--name", name, host="desktop")
    assert theirs.returncode == 1 and "no note at other.md in the index" in theirs.stderr
    assert len(theirs.stderr.strip().splitlines()) == 1
    # on the vault's host the reader says how far behind the index is, and still writes nothing
    home = json.loads(cli(*query).stdout)
    assert [r["path"] for r in home["results"]] == ["redis.md"]
    assert home["notices"] == [
        "2 notes changed on disk since the index was written: memsync watch (or memsync index) "
        "on this machine brings it up to date"
    ]
    assert _files(url, name) == indexed
    text = cli("status", "--db", url, "--name", name).stdout
    assert "1 new" in text and "1 removed" in text
    assert _index(root, url, name).returncode == 0
    assert _files(url, name) == ["extra.md", "other.md", "shared.md"]


def test_status_of_a_shared_vault_whose_host_was_never_recorded_says_where_its_notes_are(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    indexed_vault(_notes(tmp_path / "notes", "redis"), db=url, flags=["--name", name])
    with psycopg.connect(url) as conn:  # as an index made before hosts were recorded
        conn.execute(f'DELETE FROM "{name}".meta WHERE key = %s', (HOST_KEY,))
    text = cli("status", "--db", url, "--name", name).stdout
    assert [line for line in text.splitlines() if line.startswith(("files:", "state:"))] == [
        "files:    3 indexed; the notes are on the machine that indexed them, not on this one",
        "state:    not compared here: the vault's notes are on the machine that indexed them, "
        "where its writer runs",
    ]


def test_an_agent_reads_a_shared_vault_without_writing_it_and_writes_only_on_its_host(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    indexed_vault: VaultIndexer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.agent.test_mcp import served

    url, name = pg_vault
    root = _notes(tmp_path / "notes", "redis")
    indexed_vault(root, db=url, flags=["--name", name])
    (root / "redis.md").unlink()
    args = ["--db", url, "--name", name]
    for host in ("laptop", "desktop"):
        monkeypatch.setenv("MEMSYNC_HOST", host)
        [(error, text, _)] = served(
            url, ("memory_search", {"query": "runbook", "mode": "keyword"}), name=name
        )
        assert not error and "redis.md#L1-L3" in text
        assert ("1 note changed on disk" in text) == (host == "laptop")
        assert _files(url, name) == ["extra.md", "redis.md", "shared.md"]
    refused = memsync("mcp", "--writable", *args, host="desktop")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"memsync: error: --writable: the vault of {redact(url)} (vault {name}) is at {root} on host "
        "laptop, not on desktop: run memsync mcp --writable there, or without --writable here"
    ]


def test_notes_are_read_from_the_index_where_the_vault_s_files_are_not(
    tmp_path: Path,
    pg_vault: tuple[str, str],
    indexed_vault: VaultIndexer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.agent.test_mcp import served

    url, name = pg_vault
    root = _notes(tmp_path / "notes", "redis")
    write(root, "long.md", "".join(f"line {i}\n" for i in range(1, 601)))
    indexed_vault(root, db=url, flags=["--name", name])
    args = ["--db", url, "--name", name]
    # a teammate's agent: the indexed copy, capped and numbered as the file would be
    monkeypatch.setenv("MEMSYNC_HOST", "desktop")
    (error, text, lines), (error2, _, rest) = served(
        url,
        ("memory_get", {"path": "long.md"}),
        ("memory_get", {"path": "long.md", "start_line": 401}),
        name=name,
    )
    assert not error and not error2 and lines["copy"].startswith("the indexed copy, indexed at")
    assert (lines["start_line"], lines["end_line"], lines["truncated"]) == (1, 400, True)
    assert "400 | line 400" in text and "the indexed copy" in text
    assert rest["text"].startswith("line 401") and rest["end_line"] == 600
    # on the vault's host: the file itself while it is there, the copy once it is gone
    (root / "redis.md").write_text("# redis\n\nedited on disk, not indexed yet\n")
    here = cli("get", "redis.md", *args)
    assert "edited on disk" in here.stdout and here.stderr == ""
    import shutil

    shutil.rmtree(root)
    gone = cli("get", "redis.md:3", *args)
    assert gone.returncode == 0 and "3 | The redis runbook says restart" in gone.stdout
    assert "the indexed copy" in gone.stderr


def test_a_sqlite_index_serves_its_copy_when_the_vault_folder_is_gone(tmp_path: Path) -> None:
    root = _notes(tmp_path / "notes", "kafka")
    db = tmp_path / "i.sqlite"
    assert cli("index", str(root), "--db", str(db), "--provider", "none").returncode == 0
    (root / "kafka.md").unlink()
    missing = cli("get", "kafka.md:3", "--db", str(db))
    assert missing.returncode == 0 and "3 | The kafka runbook" in missing.stdout
    assert "the indexed copy" in missing.stderr
    hidden = cli("get", "../kafka.md", "--db", str(db))
    assert hidden.returncode == 1 and "'..'" in hidden.stderr
