from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import EmbeddingServer, write

from memsync.cli import main


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
    assert "state:    up to date for keyword search" in text


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


def test_status_never_says_up_to_date_when_disk_differs(tmp_path: Path) -> None:
    vault = _vault(tmp_path / "notes")
    _invoke("index", str(vault), "--provider", "none")
    write(vault, "b.md", "# new note\n")
    (vault / "a.md").write_text("# Alpha\n\nchanged\n")
    facts = json.loads(_invoke("status", "--vault", str(vault), "--json").output)
    assert facts["disk"]["new"] == 1 and facts["disk"]["changed"] == 1
    assert not facts["text_up_to_date"]
    text = _invoke("status", "--vault", str(vault)).output
    assert "up to date" not in text and "1 new, 1 changed" in text


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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = _vault(tmp_path / "one"), _vault(tmp_path / "two")
    _invoke("index", str(one), "--provider", "none")
    _invoke("index", str(two), "--provider", "none")
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
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name, command in main.commands.items():
        assert command.help, name
        assert f"memsync {name}" in readme, name
