from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.config import data_dir
from tests.conftest import ROOT, EmbeddingServer, VaultIndexer, memsync, write


def _vault(root: Path) -> Path:
    write(root, "a.md", "# Alpha\n\nThe staging Redis listens on port 6380.\n")
    write(root, "daily/2026-11-01.md", "# 2026-11-01\n\n测试服务器的SSH端口是2222\n")
    return root


def _invoke(*args: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_index_keyword_only_then_status_json(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "notes")
    result = _invoke("index", str(vault), "--provider", "none")
    assert result.exit_code == 0, result.output
    assert "2 new" in result.output and "still without vectors: 2" in result.output
    status = _invoke("status", "--vault", str(vault), "--json")
    facts = json.loads(status.output)
    assert facts["files_indexed"] == 2 and facts["chunks_pending"] == 2
    assert facts["text_up_to_date"] and not facts["complete"]
    assert facts["model"] is None
    text = _invoke("status", "--vault", str(vault)).output
    assert (
        "state:    up to date\n" in text
        and "vectors:  none (indexed without an embedding model" in text
    )


def test_index_of_a_vault_in_two_scripts_builds_the_glossary_once(tmp_path: Path) -> None:
    """Its questions across scripts read the glossary: built by `index` (3 s, once per
    machine), not in the middle of the first such question; a vault in one script never."""
    for cached in data_dir().glob("cedict-*"):
        cached.unlink()  # the session's, which every test is given
    english = tmp_path / "english"
    write(english, "a.md", "# Alpha\n\nThe staging Redis listens on port 6380.\n")
    assert _invoke("index", str(english), "--provider", "none").exit_code == 0
    assert not list(data_dir().glob("cedict-*"))
    vault = _vault(tmp_path / "notes")
    first = CliRunner().invoke(main, ["index", str(vault), "--provider", "none"])
    assert first.exit_code == 0 and "building the Chinese-English glossary" in first.stderr
    assert len(list(data_dir().glob("cedict-*"))) == 1
    again = CliRunner().invoke(main, ["index", str(vault), "--provider", "none"])
    assert again.exit_code == 0 and "glossary" not in again.stderr


def test_a_no_op_index_takes_a_glossary_of_these_rules_by_its_name(tmp_path: Path) -> None:
    """A run that wrote no note looks no dictionary up: a glossary of another dictionary version
    will do until a run writes a note, which builds the installed one's (and drops the other).
    Each run its own process, as a shell runs them (a process opens the glossary once)."""
    vault = _vault(tmp_path / "notes")
    assert memsync("index", str(vault), "--provider", "none").returncode == 0
    (built,) = data_dir().glob("cedict-*")
    older = built.rename(built.with_name("cedict-0.0.1-rules" + built.name.split("-rules")[1]))
    again = memsync("index", str(vault), "--provider", "none")
    assert again.returncode == 0 and "glossary" not in again.stderr
    assert list(data_dir().glob("cedict-*")) == [older]
    write(vault, "b.md", "# Beta\n\nA new note.\n")
    wrote = memsync("index", str(vault), "--provider", "none")
    assert wrote.returncode == 0 and "building the Chinese-English glossary" in wrote.stderr
    assert list(data_dir().glob("cedict-*")) == [built]


def test_index_with_an_openai_compatible_server_then_status_text(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    result = _invoke("index", str(vault), "--provider", "openai", "--json", env=env)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["added"] == 2 and summary["embedded"] == 2 and summary["pending_embeddings"] == 0
    text = _invoke("status", "--vault", str(vault)).output
    assert "openai text-embedding-3-small (16 dims)" in text
    assert "state:    up to date" in text


def test_db_flag_and_env_place_the_index_outside_the_vault(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "notes")
    db = tmp_path / "elsewhere" / "x.sqlite"
    assert _invoke("index", str(vault), "--provider", "none", "--db", str(db)).exit_code == 0
    assert db.exists()
    assert _invoke("status", "--db", str(db)).exit_code == 0
    assert _invoke("status", env={"MEMSYNC_DB": str(db)}).exit_code == 0
    assert sorted(p.name for p in vault.rglob("*")) == ["2026-11-01.md", "a.md", "daily"]


def test_default_index_lives_in_the_data_folder_and_status_finds_it(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "notes")
    _invoke("index", str(vault), "--provider", "none")
    result = _invoke("status", "--json")
    assert result.exit_code == 0
    facts = json.loads(result.output)
    assert facts["vault"] == str(vault.resolve())
    assert "memsync" in facts["db"] and not facts["db"].startswith(str(vault))


def test_several_vaults_without_a_choice_exit_2_and_list_them(
    indexed_vault: VaultIndexer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = _vault(tmp_path / "one"), _vault(tmp_path / "two")
    indexed_vault(one)
    indexed_vault(two)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 2
    assert str(one.resolve()) in result.output and str(two.resolve()) in result.output
    monkeypatch.chdir(two)
    facts = json.loads(CliRunner().invoke(main, ["status", "--json"]).output)
    assert facts["vault"] == str(two.resolve())


def test_errors_are_one_line_with_exit_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["index", str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert result.output.strip() == f"memsync: error: vault not found: {tmp_path / 'missing'}"
    result = CliRunner().invoke(main, ["status", "--db", str(tmp_path / "none.sqlite")])
    assert result.exit_code == 1 and result.output.count("\n") == 1


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    assert CliRunner().invoke(main, ["index"]).exit_code == 2
    assert CliRunner().invoke(main, ["index", str(tmp_path), "--provider", "magic"]).exit_code == 2


def test_arguments_and_settings_that_are_not_utf8_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = _vault(tmp_path / "notes")
    latin1 = os.fsdecode(b"caf\xe9")  # typed in a Latin-1 terminal under a UTF-8 locale
    elsewhere = str(tmp_path / f"{latin1}.sqlite")
    for args in (
        ["query", "--vault", str(vault), latin1],
        ["query", "--vault", str(vault), "--tag", latin1, "redis"],
        ["get", "--vault", str(vault), f"{latin1}.md:1-2"],
        ["index", str(vault), "--db", elsewhere],
    ):
        done = memsync(*args)
        assert done.returncode == 2, done.stderr
        assert "Error: argument " in done.stderr and "caf\\xe9" in done.stderr
        assert "is not UTF-8 text" in done.stderr
    done = memsync("status", env={"MEMSYNC_DB": elsewhere})
    assert done.returncode == 1
    assert (
        done.stderr == f"memsync: error: setting db: {tmp_path}/caf\\xe9.sqlite is not UTF-8 text\n"
    )
    assert not list(tmp_path.glob("*.sqlite"))
    # a vault folder whose own name is not UTF-8, indexed from inside it
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/v\xe9"))
    write(folder, "a.md", "# Alpha\n")
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(main, ["index", ".", "--provider", "none"])
    assert result.exit_code == 1
    assert (
        result.output
        == f"memsync: error: the vault's path {tmp_path}/v\\xe9 is not UTF-8: rename the folder\n"
    )


def test_http_provider_failure_keeps_text_and_says_what_to_do(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    embedding_server.script = [(401, {})]
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    result = CliRunner().invoke(main, ["index", str(vault), "--provider", "openai"], env=env)
    assert result.exit_code == 1 and "API key" in result.output
    assert "keyword search works" in result.output and "run memsync index again" in result.output
    facts = json.loads(_invoke("status", "--vault", str(vault), "--json").output)
    assert facts["files_indexed"] == 2 and facts["chunks_pending"] == 2


def test_every_command_has_help_and_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, command in main.commands.items():
        assert command.help, name
        assert f"memsync {name}" in readme, name


@pytest.mark.parametrize(
    "args, allowed",
    [
        (["query", "x", "-n", "99999999999999999999999"], "between 1 and 1000"),
        (["query", "x", "-n", "0"], "between 1 and 1000"),
        (["query", "x", "--min-score", "nan"], "between 0 and 1"),
        (["query", "x", "--text-weight", "inf"], "between 0 and 100"),
        (["query", "x", "--half-life", "nan"], "above 0"),
        (["query", "x", "--half-life", "0"], "above 0"),
        (["query", "x", "--half-life", "-3"], "above 0"),
        (["query", "x", "--mmr-lambda", "nan"], "between 0 and 1"),
        (["query", "x", "--vector-weight", "0", "--text-weight", "0"], "cannot both be 0"),
        (["query", "x", "-n", "many"], "cannot read 'many' as a whole number"),
        (["index", ".", "--max-file-mb", "nan"], "above 0"),
        (["index", ".", "--max-file-mb", "0"], "above 0"),
        (["watch", ".", "--debounce", "-1"], "between 0 and 60000"),
    ],
)
def test_numeric_options_are_checked_when_parsed_exit_2_with_the_range(
    args: list[str], allowed: str
) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert allowed in result.output and "Traceback" not in result.output


def test_a_foreign_database_as_db_is_refused_in_one_line_and_not_changed(tmp_path: Path) -> None:
    import hashlib

    import apsw

    other = tmp_path / "app.sqlite"
    conn = apsw.Connection(str(other))
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES(1)")
    conn.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    for command in (["query", "x"], ["status"]):
        result = CliRunner().invoke(main, [*command, "--db", str(other)])
        assert result.exit_code == 1 and result.output.count("\n") == 1
        assert "is not a memsync index" in result.output
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before


def test_an_index_damaged_after_it_opened_says_so_and_not_that_it_is_intact(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    import apsw

    vault = tmp_path / "notes"
    for i in range(40):
        write(vault, f"n{i}.md", f"# Note {i}\n\n" + "kombucha fermentation notes\n" * 50)
    db = tmp_path / "i.sqlite"
    indexed_vault(vault, db=db)
    conn = apsw.Connection(str(db))
    page_size = conn.execute("PRAGMA page_size").fetchall()[0][0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks_fts_data'")
    page = root.fetchall()[0][0]
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(db, "r+b") as handle:  # the schema reads well; the keyword index does not
        handle.seek((page - 1) * page_size)
        handle.write(b"\xde\xad" * (page_size // 2))
    done = memsync("query", "kombucha", "--db", str(db), "--vault", str(vault), "--mode", "keyword")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "the index file is damaged" in done.stderr
    assert "intact" not in done.stderr


def test_query_and_status_work_on_an_index_this_user_cannot_write(
    indexed_vault: VaultIndexer, world_readable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import as_nobody

    monkeypatch.setenv("MEMSYNC_CONFIG", str(world_readable / "config.toml"))  # none, readable
    vault = _vault(world_readable / "notes")
    db = world_readable / "i.sqlite"
    indexed_vault(vault, db=db)
    db.chmod(0o644)
    write(vault, "b.md", "# New\n\nport 6380 again\n")  # the index is now behind

    def query() -> str:
        result = CliRunner().invoke(main, ["query", "6380", "--db", str(db), "--json"])
        return f"{result.exit_code} {result.stdout}"

    code, _, payload = as_nobody(query).partition(" ")
    assert code == "0", payload
    facts = json.loads(payload)
    assert facts["results"][0]["path"] == "a.md"
    assert any("read-only for this user" in n for n in facts["notices"])

    def status() -> str:
        result = CliRunner().invoke(main, ["status", "--db", str(db)])
        return f"{result.exit_code} {result.stdout}"

    code, _, text = as_nobody(status).partition(" ")
    assert code == "0" and "read-only for this user" in text and "1 new" in text


def test_a_database_error_after_opening_is_one_line_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import apsw

    from memsync.store.sqlite_store import SqliteStore

    vault = _vault(tmp_path / "notes")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise apsw.FullError("database or disk is full")

    monkeypatch.setattr(SqliteStore, "_run_many", disk_full)  # the store's every write
    result = CliRunner().invoke(main, ["index", str(vault), "--provider", "none"])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "the disk that holds the index is full: free some space" in result.output


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB file system of its own (tmpfs), which a test can fill; mounting needs root."""
    import subprocess

    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb", buffering=0) as out, pytest.raises(OSError):
        while True:
            out.write(b"\0" * 65536)


def test_a_full_disk_is_called_full_naming_the_index(
    indexed_vault: VaultIndexer, tmp_path: Path, small_disk: Path
) -> None:
    """SQLite reports a full disk met while making its shared memory file as an I/O error, and a
    new index failed on its lock file with a bare OSError."""
    vault = _vault(tmp_path / "notes")
    kept, new = small_disk / "kept.sqlite", small_disk / "new.sqlite"
    indexed_vault(vault, db=kept)
    _fill(small_disk)
    write(vault, "b.md", "# Beta\n\nA note written while the index's disk was full.\n")
    for db in (kept, new):
        done = memsync("index", str(vault), "--provider", "none", "--db", str(db))
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert str(db) in done.stderr and "is full: free some space" in done.stderr


def test_a_retried_provider_is_said_like_memsync_s_other_messages(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    embedding_server.script = [(503, {"Retry-After": "0"})]
    env = {"OPENAI_API_KEY": "key", "OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    done = memsync("index", str(vault), "--provider", "openai", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "memsync: openai answered 503; retry 1 in 0.0s\n"


def test_openai_without_a_key_fails_at_once_naming_the_variable(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "notes")
    result = CliRunner().invoke(main, ["index", str(vault), "--provider", "openai"])
    assert result.exit_code == 1 and "set OPENAI_API_KEY" in result.output


def test_provider_none_sends_no_query_to_the_index_s_provider(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    indexed_vault(vault, provider="openai", env=env)
    sent = len(embedding_server.requests)
    result = _invoke(
        "query",
        "redis port",
        "--vault",
        str(vault),
        "--json",
        env={**env, "MEMSYNC_PROVIDER": "none"},
    )
    assert len(embedding_server.requests) == sent
    assert "provider is none" in " ".join(json.loads(result.output)["notices"])


def test_status_lists_notes_indexed_with_a_warning(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    vault = _vault(tmp_path / "notes")
    write(vault, "broken.md", "---\ntags: [unclosed\n---\nstill indexed #rescued\n")
    indexed_vault(vault)
    facts = json.loads(_invoke("status", "--vault", str(vault), "--json").output)
    assert facts["warnings"] == [
        {"path": "broken.md", "warning": "front matter is not valid YAML (line 3): indexed as text"}
    ]
    text = _invoke("status", "--vault", str(vault)).output
    assert "warnings: 1 note(s), indexed anyway" in text and "broken.md: front matter" in text


def test_notes_whose_front_matter_cannot_be_read_are_indexed_as_text_and_listed(
    tmp_path: Path,
) -> None:
    from tests.units.test_metadata import NESTED_ALIASES

    vault = tmp_path / "notes"
    fronts = {
        "feb30.md": "date: 2026-02-30",
        "month13.md": "date: 2026-13-01",
        "year0.md": "date: 0000-01-01",
        "digits.md": "n: " + "9" * 5000,
        "nested.md": "deep: " + "[" * 3000 + "]" * 3000,
    }
    for name, front in fronts.items():
        write(vault, name, f"---\n{front}\n---\n# {name}\n\nkestrel words\n")
    write(vault, "aliases.md", NESTED_ALIASES + "kestrel words\n")
    write(vault, "plain.md", "# Plain\n\nkestrel words\n")
    db = tmp_path / "i.sqlite"
    done = memsync("index", str(vault), "--db", str(db), "--provider", "none", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["added"] == 7 and report["skipped"] == []
    assert {w["path"] for w in report["warnings"]} == set(fronts) | {"aliases.md"}
    assert db.stat().st_size < 1 << 20  # proportional to the notes, not to what aliases expand to
    found = json.loads(memsync("query", "kestrel", "--db", str(db), "-n", "10", "--json").stdout)
    assert len(found["results"]) == 7
    status = memsync("status", "--db", str(db)).stdout
    assert "front matter cannot be read" in status and "uses YAML aliases" in status


@pytest.mark.parametrize("flag", ["--since", "--until"])
@pytest.mark.parametrize("value", ["99999m", "0000-01-01", "2026-02-30"])
def test_an_out_of_range_date_is_a_usage_error(
    indexed_vault: VaultIndexer, tmp_path: Path, flag: str, value: str
) -> None:
    vault = _vault(tmp_path / "notes")
    indexed_vault(vault)
    done = memsync("query", "port", "--vault", str(vault), flag, value)
    assert done.returncode == 2
    assert f"{value!r} is not a date: use YYYY-MM-DD" in done.stderr


def test_index_tells_a_skipped_file_and_a_warning_once_in_its_report(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    (vault / "picture.md").write_bytes(b"\x89PNG\x00\x00binary")
    (vault / "latin.md").write_bytes("caf\xe9 mike".encode("latin-1"))
    done = memsync("index", str(vault), "--db", str(tmp_path / "i.sqlite"), "--provider", "none")
    assert done.returncode == 0, done.stderr
    told = done.stdout + done.stderr
    assert told.count("picture.md: binary file") == 1, told
    assert told.count("latin.md: invalid UTF-8") == 1, told
