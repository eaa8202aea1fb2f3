"""The module boundaries the style guide promises, checked from the sources."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memsync"
SOURCES = {p.stem: p.read_text() for p in PACKAGE.glob("*.py")}
# the PostgreSQL backend: the store, the modules of its jobs, its writer lock
POSTGRES = {
    "pg_store",
    "pg_connect",
    "pg_schema",
    "pg_vectors",
    "pg_keywords",
    "pg_bm25",
    "pg_lock",
}


def _importers(module: str) -> set[str]:
    pattern = re.compile(rf"^\s*(import {module}\b|from {module}\b)", re.MULTILINE)
    return {name for name, text in SOURCES.items() if pattern.search(text)}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports_of(source: str, type_only: bool = False) -> tuple[set[str], set[str]]:
    """(memsync modules, top-level third-party or standard modules) a module imports, at any
    level of the code (function-level imports count), except under `if TYPE_CHECKING:` unless
    `type_only` (what the type checker follows too)."""
    ours: set[str] = set()
    others: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child) and not type_only:
                for branch in child.orelse:  # type: ignore[attr-defined]
                    visit(branch)
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level == 1 and child.module:
                    ours.add(child.module.split(".")[0])
                elif child.level == 1:
                    ours.update(alias.name for alias in child.names)
                elif child.module and child.module.split(".")[0] == "memsync":
                    ours.add(child.module.split(".")[1])
                elif child.module:
                    others.add(child.module.split(".")[0])
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    parts = alias.name.split(".")
                    (ours.add(parts[1]) if parts[0] == "memsync" else others.add(parts[0]))
            visit(child)

    visit(ast.parse(source))
    return ours, others - {"__future__"}


GRAPH = {name: imports_of(text)[0] for name, text in SOURCES.items()}
# with the imports only the type checker follows: a circle there is a circle of concepts too
TYPED_GRAPH = {name: imports_of(text, type_only=True)[0] for name, text in SOURCES.items()}


def _reachable(start: str, graph: dict[str, set[str]] = GRAPH) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for target in graph.get(stack.pop(), set()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_the_import_graph_has_no_circle() -> None:
    """No module imports one that imports it back, directly or through others."""
    circular = sorted(name for name in GRAPH if name in _reachable(name))
    assert circular == [], circular
    typed = sorted(name for name in TYPED_GRAPH if name in _reachable(name, TYPED_GRAPH))
    assert typed == [], typed


def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\nfrom . import a\nif TYPE_CHECKING:\n"
        "    from .b import B\ndef f():\n    from .c import C\n    import numpy\n"
    )
    assert imports_of(source) == ({"a", "c"}, {"typing", "numpy"})


def test_the_cli_and_the_mcp_server_talk_to_the_library_face_only() -> None:
    assert GRAPH["cli"] <= {"memory", "output", "config", "errors", "watcher", "mcp_server"}
    assert GRAPH["mcp_server"] <= {"memory", "output", "config", "errors"}


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
    assert _importers("psycopg") <= POSTGRES
    assert _importers("pgvector") <= POSTGRES


def test_no_module_but_the_backends_and_locate_names_a_backend() -> None:
    """Sync, search, the watcher, the CLI talk to the store protocols; locate picks the backend."""
    backends = re.compile(r"\b(sqlite_store|pg_store|SqliteStore|PgStore)\b")
    naming = {name for name, text in SOURCES.items() if backends.search(text)}
    shared = {"sql_tables", "sql_schema", "sql_reading"}
    assert naming == {"sqlite_store", "locate", "store", "tokenizer"} | shared | (
        POSTGRES - {"pg_bm25"}
    )


def test_a_no_op_sync_imports_no_numpy() -> None:
    """numpy costs 85 ms at start: the modules a sync runs import it only where vectors are made."""
    import subprocess

    code = (
        "import sys, memsync.cli, memsync.sync, memsync.store, memsync.vault, memsync.lock; "
        "print('numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_only_the_backends_speak_sql() -> None:
    """The index's SQL lives in its backends; the glossary keeps a file of its own (not the
    index, the same on every backend) and the only other SQL is its."""
    sql = re.compile(r"\b(SELECT .* FROM|INSERT INTO|DELETE FROM|CREATE TABLE|UPDATE \w+ SET)\b")
    speaking = {name for name, text in SOURCES.items() if sql.search(text)}
    assert speaking == {"sqlite_store", "sql_tables", "sql_reading", "glossary"} | POSTGRES


# the pure modules, each with the one library it may use beside the standard library
PURE = {
    "chunking": {"tiktoken"},
    "fts": set(),
    "evaluate": set(),
    "metadata": {"yaml"},
    "ranking": {"numpy"},
    "filters": set(),
    "vectors": {"numpy"},
    "redact": set(),
    "text": set(),
}


def test_pure_modules_import_only_the_standard_library_and_their_one_dependency() -> None:
    for name, allowed in PURE.items():
        ours, others = imports_of(SOURCES[name])
        assert others - set(sys.stdlib_module_names) <= allowed, name
        assert ours <= set(PURE) | {"errors"}, name  # and only other pure modules of memsync


def test_every_module_says_its_one_job_in_its_opening_line() -> None:
    for name, text in SOURCES.items():
        if name in ("__init__", "__main__"):
            continue
        docstring = ast.get_docstring(ast.parse(text))
        assert docstring and len(docstring.split("\n")[0]) > 20, name
