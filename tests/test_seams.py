"""The module boundaries the style guide promises, checked."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memsync"
SOURCES = {p.stem: p.read_text() for p in PACKAGE.glob("*.py")}


def _importers(module: str) -> set[str]:
    pattern = re.compile(rf"^\s*(import {module}\b|from {module}\b)", re.MULTILINE)
    return {name for name, text in SOURCES.items() if pattern.search(text)}


def test_only_the_cli_imports_click() -> None:
    assert _importers("click") == {"cli"}


def test_only_the_embedders_import_httpx() -> None:
    assert _importers("httpx") == {"embedders"}


def test_only_the_watcher_imports_watchdog() -> None:
    assert _importers("watchdog") == {"watcher"}


def test_only_the_mcp_server_imports_mcp() -> None:
    assert _importers("mcp") == {"mcp_server"}


def test_only_the_sqlite_backend_and_its_tokenizer_import_apsw() -> None:
    assert _importers("apsw") == {"sqlite_store", "tokenizer"}


def test_only_the_postgres_backend_imports_psycopg_and_pgvector() -> None:
    assert _importers("psycopg") == {"pg_store"}
    assert _importers("pgvector") == {"pg_store"}


def test_no_module_but_the_backends_and_locate_names_a_backend() -> None:
    """Sync, search, the watcher, the CLI talk to store.Store; locate picks the backend."""
    backends = re.compile(r"\b(sqlite_store|pg_store|SqliteStore|PgStore)\b")
    naming = {name for name, text in SOURCES.items() if backends.search(text)}
    assert naming == {"sqlite_store", "pg_store", "locate", "store", "tokenizer", "sql_tables"}


def test_a_no_op_sync_imports_no_numpy() -> None:
    """numpy costs 85 ms at start: the modules a sync runs import it only where vectors are made."""
    import subprocess
    import sys

    code = (
        "import sys, memsync.cli, memsync.sync, memsync.store, memsync.vault, memsync.lock; "
        "print('numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_only_the_backends_speak_sql() -> None:
    sql = re.compile(r"\b(SELECT .* FROM|INSERT INTO|DELETE FROM|CREATE TABLE|UPDATE \w+ SET)\b")
    speaking = {name for name, text in SOURCES.items() if sql.search(text)}
    assert speaking == {"sqlite_store", "pg_store", "sql_tables"}


def test_pure_modules_import_only_the_standard_library() -> None:
    for name in ("chunking", "fts", "evaluate"):
        imports = re.findall(r"^\s*(?:from|import) (\w+)", SOURCES[name], re.MULTILINE)
        assert not set(imports) & {"apsw", "httpx", "watchdog", "click", "numpy", "sqlite_vec"}, (
            name
        )
