from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config import default_db_path, is_postgres, load_config
from memsync.errors import ConfigError


def test_file_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file = tmp_path / "config.toml"
    config_file.write_text('limit = 9\nmode = "keyword"\nmin_score = 0.5\ndecay = true\n')
    monkeypatch.setenv("MEMSYNC_CONFIG", str(config_file))
    assert load_config().limit == 9 and load_config().decay is True
    monkeypatch.setenv("MEMSYNC_LIMIT", "4")
    monkeypatch.setenv("MEMSYNC_DECAY", "no")
    config = load_config()
    assert (config.limit, config.mode, config.decay, config.min_score) == (4, "keyword", False, 0.5)
    assert load_config(limit=2, mode=None).limit == 2


def test_provider_urls_come_from_their_usual_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1")
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:5678")
    config = load_config()
    assert config.openai_base_url == "http://127.0.0.1:1234/v1"
    assert config.ollama_host == "http://127.0.0.1:5678"


@pytest.mark.parametrize(
    "text, message",
    [
        ("limmit = 3\n", "unknown setting"),
        ('provider = "magic"\n', "unknown provider"),
        ('limit = "many"\n', "cannot read"),
        ("mmr_lambda = 2\n", "between 0 and 1"),
        ("ef_search = 50\n", "ef_search must be between 100 and 1000"),
        ("vector_weight = 0\ntext_weight = 0\n", "cannot both be 0"),
        ("limit = [\n", "cannot read config file"),
    ],
)
def test_bad_settings_say_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    config_file = tmp_path / "config.toml"
    config_file.write_text(text)
    monkeypatch.setenv("MEMSYNC_CONFIG", str(config_file))
    with pytest.raises(ConfigError, match=message):
        load_config()


def test_the_default_index_is_outside_the_vault_and_one_per_vault(tmp_path: Path) -> None:
    one, two = tmp_path / "notes", tmp_path / "other" / "notes"
    one.mkdir()
    two.mkdir(parents=True)
    assert default_db_path(one) != default_db_path(two)
    assert not str(default_db_path(one)).startswith(str(one))
    assert default_db_path(one).name.startswith("notes-")


def test_a_db_or_reranker_setting_is_refused_without_its_password() -> None:
    """A libpq key=value string is a PostgreSQL --db, not a file; a URL of another scheme is
    neither, and neither error shows the password."""
    assert is_postgres("host=db user=ana password=Kv-53cret dbname=notes")
    assert not is_postgres("notes.sqlite") and not is_postgres("/tmp/x=1.sqlite")
    with pytest.raises(ConfigError) as refused:
        load_config(db="postgresq://ana:Kv-53cret@db/notes")
    assert "Kv-53cret" not in str(refused.value) and "ana@" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "htps://ana:Kv-53cret@rerank.example/rerank",
        "http://ana:Kv-53cret@[::1",
        "http://ana:Kv-53cret@127.0.0.1:x/",
    ],
)
def test_a_rerank_url_that_cannot_be_used_is_refused_without_its_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """Neither the password nor the user name (a token, for some servers) is shown, whether
    the URL comes from the config file, the environment or a flag."""
    config_file = tmp_path / "config.toml"
    config_file.write_text(f'rerank_url = "{url}"\n')
    for source in ("file", "environment", "flag"):
        with monkeypatch.context() as scope:
            if source == "file":
                scope.setenv("MEMSYNC_CONFIG", str(config_file))
            elif source == "environment":
                scope.setenv("MEMSYNC_RERANK_URL", url)
            with pytest.raises(ConfigError) as refused:
                load_config(**({"rerank_url": url} if source == "flag" else {}))
        message = str(refused.value)
        assert "rerank_url" in message and "***@" in message, message
        assert "Kv-53cret" not in message and "ana" not in message, message
