"""The module boundaries the style guide promises, checked from the sources: modules are named by
their dotted path under memsync (`store.sqlite_store`; a room's `__init__` by the room's name)."""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memsync"


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


SOURCES = {_dotted(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}
ROOMS = {name for name in SOURCES if (PACKAGE / name.replace(".", "/")).is_dir()}
# the PostgreSQL backend: the store, the modules of its jobs, its writer lock
POSTGRES = {name for name in SOURCES if name.startswith("store.pg_")}
# what the rest of memsync may use of the store: its protocols, where an index is and who writes it
STORE_FACE = {"store.protocols", "store.locate", "store.lock", "store.origin"}


def _importers(library: str) -> set[str]:
    return {name for name, text in SOURCES.items() if library in imports_of(text, name)[1]}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _package(module: str) -> str:
    """The package a module's relative imports start from ('' for memsync itself)."""
    return module if module in ROOMS else module.rpartition(".")[0]


def _resolved(base: str, names: list[str]) -> set[str]:
    """`from BASE import NAMES`: the submodules named, else BASE itself."""
    found = {f"{base}.{n}".lstrip(".") for n in names if f"{base}.{n}".lstrip(".") in SOURCES}
    return found or {base}


def imports_of(source: str, module: str = "", type_only: bool = False) -> tuple[set[str], set[str]]:
    """(memsync modules, top-level third-party or standard modules) a module imports, at any
    level of the code (function-level imports count), except under `if TYPE_CHECKING:` unless
    `type_only` (what the type checker follows too)."""
    ours: set[str] = set()
    others: set[str] = set()
    package = _package(module)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child) and not type_only:
                for branch in child.orelse:  # type: ignore[attr-defined]
                    visit(branch)
                continue
            if isinstance(child, ast.ImportFrom):
                names = [alias.name for alias in child.names]
                if child.level:
                    start = package.split(".") if package else []
                    start = start[: len(start) - (child.level - 1)]
                    base = ".".join([*start, *([child.module] if child.module else [])])
                    ours.update(_resolved(base, names))
                elif child.module and child.module.split(".")[0] == "memsync":
                    ours.update(_resolved(child.module.partition(".")[2], names))
                elif child.module:
                    others.add(child.module.split(".")[0])
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    top, _, rest = alias.name.partition(".")
                    (ours.add(rest) if top == "memsync" else others.add(top))
            visit(child)

    visit(ast.parse(source))
    return ours - {""}, others - {"__future__"}


GRAPH = {name: imports_of(text, name)[0] for name, text in SOURCES.items()}
# with the imports only the type checker follows: a circle there is a circle of concepts too
TYPED_GRAPH = {name: imports_of(text, name, type_only=True)[0] for name, text in SOURCES.items()}


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


# the faces: the CLI, the MCP server and the rooms only they use, the HTTP server and the relay
FACES = {"__main__", "cli", "cli_common", "mcp_server", "agent", "serve"}


def _room(module: str) -> str:
    """The room a module is in, or the top-level module itself."""
    return module.split(".")[0]


def rooms_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which rooms (and top-level modules) import which others."""
    rooms: dict[str, set[str]] = {}
    for name, targets in graph.items():
        outside = {_room(t) for t in targets} - {_room(name)}
        rooms.setdefault(_room(name), set()).update(outside)
    return rooms


def test_no_two_rooms_import_each_other_and_nothing_below_the_faces_imports_one() -> None:
    """As the type checker sees them (function-level and type-only imports count): no circle of
    rooms, and nothing under the faces imports one; cli_common nothing of serve/, links/ (pure
    rules) nothing of store/, output nothing of agent/."""
    rooms = rooms_graph(TYPED_GRAPH)
    circular = sorted(room for room in rooms if room in _reachable(room, rooms))
    assert circular == [], circular
    upward = {room: found & FACES for room, found in rooms.items() if room not in FACES}
    assert {room: found for room, found in upward.items() if found} == {}
    assert "serve" not in rooms["cli_common"]
    assert "store" not in rooms["links"]
    assert "agent" not in rooms["output"]


def test_the_rooms_graph_sees_function_level_and_type_only_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..agent.results import T\n"
        "def f():\n    from ..serve.relay import Relay\n"
    )
    graph = {"links.parse": imports_of(source, "links.parse", type_only=True)[0]}
    assert rooms_graph(graph) == {"links": {"agent", "serve"}}


def test_the_graph_resolves_relative_imports_and_skips_type_checking_ones() -> None:
    source = (
        "from typing import TYPE_CHECKING\nfrom . import pipeline\nfrom ..store import lock\n"
        "from .. import fts\nif TYPE_CHECKING:\n    from .ranking import B\n"
        "def f():\n    from ..errors import C\n    import numpy\n"
    )
    assert imports_of(source, "search.options") == (
        {"search.pipeline", "store.lock", "fts", "errors"},
        {"typing", "numpy"},
    )
    assert "search.ranking" in imports_of(source, "search.options", type_only=True)[0]


def test_the_cli_and_the_mcp_server_talk_to_the_library_face_only() -> None:
    face = {"memory", "output", "config", "errors"}
    relay = {"serve.relay", "serve.session"}
    cli_may = face | relay | {"cli_common", "sync.watcher", "mcp_server", "serve.commands"}
    assert GRAPH["cli"] <= cli_may
    assert GRAPH["cli_common"] <= face
    agent = {"shapes", "agent.results", "agent.lending", "agent.stdio"}
    assert GRAPH["mcp_server"] <= face | agent
    relayed = {"memory", "store.locate", "serve.endpoint", "serve.session"}
    assert GRAPH["serve.relay"] <= relayed | {"config"}  # config: the client's Invocation


def test_the_shells_client_path_is_the_standard_library_alone() -> None:
    """`memsync query` imports the entry and the endpoint before it knows whether a daemon
    answers: nothing of memsync's own beyond them, no third-party library."""
    for name in ("__main__", "serve.endpoint", "serve.session"):
        modules, libraries = imports_of(SOURCES[name], name)
        assert modules <= {"serve.endpoint", "cli"}, (name, modules)
        assert libraries <= set(sys.stdlib_module_names), (name, libraries)


def test_a_room_is_used_through_its_modules_never_its_init() -> None:
    """A room's `__init__` holds its docstring only: importing it would load nothing useful,
    and modules inside a room import each other directly."""
    assert not [name for name, targets in GRAPH.items() if targets & ROOMS], GRAPH
    for room in ROOMS:
        assert not imports_of(SOURCES[room], room)[0], room


def test_outside_the_store_only_its_protocols_locate_lock_and_origin_are_used() -> None:
    outside = {name: targets for name, targets in GRAPH.items() if not name.startswith("store")}
    used = {t for targets in outside.values() for t in targets if t.startswith("store.")}
    assert used <= STORE_FACE, used - STORE_FACE


def test_only_the_cli_modules_import_click() -> None:
    assert _importers("click") == {"cli", "cli_common", "serve.commands"}


def test_only_the_http_seam_of_the_embedders_imports_httpx() -> None:
    """Every request to a provider or a reranker goes through embed.http (its timeouts, retries,
    deadline and redaction); only the embed room uses it."""
    assert _importers("httpx") == {"embed.http"}
    assert {name for name, targets in GRAPH.items() if "embed.http" in targets} <= {
        "embed.remote",
        "embed.rerank",
    }


def test_only_the_watcher_imports_watchdog() -> None:
    assert _importers("watchdog") == {"sync.watcher"}


def test_only_the_mcp_server_and_the_http_server_import_mcp() -> None:
    assert _importers("mcp") == {"mcp_server", "agent.stdio", "serve.http_app", "serve.guard"}


# the HTTP server: its routes, the page's, its door and its runner; nothing else imports the web
# stack (the page's HTML is made in serve.page, which imports none)
HTTP = {"serve.http_app", "serve.page_routes", "serve.guard", "serve.runner"}


def test_only_the_http_server_imports_starlette_and_uvicorn() -> None:
    assert _importers("starlette") == HTTP
    assert _importers("uvicorn") == {"serve.runner"}
    outside = set().union(*(GRAPH[name] for name in SOURCES if not name.startswith("serve")))
    used = {name for name in outside if name.startswith("serve")}
    assert used == {"serve.commands", "serve.session", "serve.endpoint"}


def test_index_query_and_watch_run_without_the_web_stack(tmp_path: Path) -> None:
    """`memsync index` and `memsync query` (watch shares their modules) load no web framework,
    nor the MCP SDK: they start fast, and work where the mcp extra is not installed."""
    import subprocess

    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\nhello there\n")
    code = (
        "import sys\nfrom memsync.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "import memsync.sync.watcher\n"
        "web = sorted({m.split('.')[0] for m in sys.modules} & {'starlette', 'uvicorn', 'mcp'})\n"
        "print('loaded:', web, file=sys.stderr)"
    )
    env = {**os.environ, "MEMSYNC_PROVIDER": "none"}
    for args in (
        ["index", str(vault)],
        ["query", "hello", "--mode", "keyword", "--vault", str(vault)],
    ):
        result = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert "loaded: []" in result.stderr, (args, result.stderr)


def test_only_the_sqlite_backend_and_its_tokenizer_import_apsw() -> None:
    assert _importers("apsw") == {"store.sqlite_store", "store.tokenizer"}


def test_only_the_postgres_backend_imports_psycopg_and_pgvector() -> None:
    assert _importers("psycopg") <= POSTGRES
    assert _importers("pgvector") <= POSTGRES


def test_no_module_but_the_backends_and_locate_names_a_backend() -> None:
    """Sync, search, the watcher, the CLI talk to the store protocols; locate picks the backend."""
    backends = re.compile(r"\b(sqlite_store|pg_store|SqliteStore|PgStore)\b")
    naming = {name for name, text in SOURCES.items() if backends.search(text)}
    shared = {"store.sql_tables", "store.sql_schema", "store.sql_reading"}
    assert naming == {
        "store.sqlite_store",
        "store.locate",
        "store.protocols",
        "store.tokenizer",
    } | shared | (POSTGRES - {"store.pg_bm25"})


def test_a_no_op_sync_imports_no_numpy() -> None:
    """numpy costs 85 ms at start: the modules a sync runs import it only where vectors are made."""
    import subprocess

    code = (
        "import sys, memsync.cli, memsync.sync.syncer, memsync.store.protocols, memsync.vault, "
        "memsync.store.lock; print('numpy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_a_search_loads_numpy_only_with_its_vector_side() -> None:
    """In search/, numpy comes with vector_side (and the cosines it calibrates), which the
    pipeline imports in its vector leg alone, and related notes where the note has vectors: a
    keyword query never loads it."""
    room = [name for name in SOURCES if name.startswith("search.")]
    with_numpy = {name for name in room if "numpy" in imports_of(SOURCES[name], name)[1]}
    assert with_numpy == {"search.vector_side", "search.cosines"}
    importers = {name for name, targets in GRAPH.items() if "search.vector_side" in targets}
    assert importers == {"search.pipeline", "search.related"}
    for name in importers:
        top = imports_of(
            "\n".join(
                ast.unparse(node)
                for node in ast.parse(SOURCES[name]).body
                if isinstance(node, (ast.Import, ast.ImportFrom))
            ),
            name,
        )[0]
        assert "search.vector_side" not in top, name


def test_only_the_store_speaks_sql() -> None:
    """The index's SQL lives in the store; the glossary keeps a file of its own (not the index,
    the same on every backend) and the only other SQL is its."""
    sql = re.compile(r"\b(SELECT .* FROM|INSERT INTO|DELETE FROM|CREATE TABLE|UPDATE \w+ SET)\b")
    speaking = {name for name, text in SOURCES.items() if sql.search(text)}
    assert (
        speaking
        == {
            "store.sqlite_store",
            "store.sql_tables",
            "store.sql_reading",
            "store.sql_schema",
            "store.sql_links",
            "search.glossary",
        }
        | POSTGRES
    )


# the pure modules, each with the one library it may use beside the standard library
PURE = {
    "chunking": {"tiktoken"},
    "fts": set(),
    "links.parse": set(),
    "links.resolve": set(),
    "links.sections": set(),
    "metadata": {"yaml"},
    "search.calibration": set(),
    "search.evaluate": set(),
    "search.cosines": {"numpy"},
    "search.query": set(),
    "search.ranking": set(),
    "search.snippets": set(),
    "filters": set(),
    "vectors": {"numpy"},
    "redact": set(),
    "text": set(),
}


def test_pure_modules_import_only_the_standard_library_and_their_one_dependency() -> None:
    for name, allowed in PURE.items():
        ours, others = imports_of(SOURCES[name], name)
        assert others - set(sys.stdlib_module_names) <= allowed, name
        assert ours <= set(PURE) | {"errors"}, name  # and only other pure modules of memsync


def test_the_top_level_holds_about_twenty_modules_and_no_module_is_over_about_600_lines() -> None:
    top = [name for name in SOURCES if "." not in name and name not in ROOMS]
    assert len(top) <= 22, top
    assert not [n for n, text in SOURCES.items() if text.count("\n") > 640], "split it by job"


def test_every_module_says_its_one_job_in_its_opening_line() -> None:
    for name, text in SOURCES.items():
        if name in ("__init__", "__main__"):
            continue
        docstring = ast.get_docstring(ast.parse(text))
        assert docstring and len(docstring.split("\n")[0]) > 20, name


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """The lines of a function's body that hold code: its signature, docstring, comments and
    blank lines are not counted."""
    first = function.body[0]
    has_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    docstring = range(first.lineno, (first.end_lineno or 0) + 1) if has_docstring else range(0)
    return sum(
        1
        for number in range(first.lineno, (function.end_lineno or 0) + 1)
        if number not in docstring and lines[number - 1].strip()[:1] not in ("", "#")
    )


def long_functions(limit: int = 60) -> dict[str, str]:
    """Each function of memsync over `limit` code lines, by module.name, with its docstring."""
    found: dict[str, str] = {}
    for name, text in SOURCES.items():
        lines = text.split("\n")
        for node in ast.walk(ast.parse(text)):
            function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if function and code_lines(node, lines) > limit:  # type: ignore[arg-type]
                found[f"{name}.{node.name}"] = ast.get_docstring(node) or ""
    return found


def test_code_lines_count_the_body_without_its_docstring_comments_and_blank_lines() -> None:
    source = (
        'def f(\n    a: int,\n) -> int:\n    """Doc.\n\n    more."""\n    # why\n\n'
        "    b = a\n    return b\n"
    )
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert code_lines(function, source.split("\n")) == 2


def test_at_most_five_functions_are_over_sixty_code_lines_and_each_says_why() -> None:
    """A long function is split into named steps unless it reads better whole; then its
    docstring has a paragraph starting "Long because"."""
    long = long_functions()
    assert len(long) <= 5, sorted(long)
    unexplained = [name for name, doc in long.items() if "\nLong because" not in "\n" + doc]
    assert not unexplained, unexplained


def test_the_search_pages_html_is_made_by_pure_renderers() -> None:
    """serve.page makes the page's HTML from values: no web framework, no store, no face."""
    ours, others = imports_of(SOURCES["serve.page"], "serve.page")
    assert ours <= {"config", "errors", "output"}, ours
    assert others <= set(sys.stdlib_module_names), others


# what would change the whole process for one request: its environment, its working folder,
# its standard streams
PROCESS_WIDE = re.compile(
    r"os\.environ\s*\[[^\]]*\]\s*=(?!=)|os\.environ\.(update|clear|pop|popitem|setdefault)\b"
    r"|\bdel\s+os\.environ|os\.(putenv|unsetenv|chdir|fchdir)\b"
    r"|sys\.(stdout|stderr|stdin)\s*=(?!=)|^\s*sys\.(stdout|stderr|stdin)\s*,[^=(\n]*=(?!=)"
    r"|redirect_std(out|err)",
    re.MULTILINE,
)


def test_no_module_changes_the_processs_environment_folder_or_streams() -> None:
    """A daemon runs commands for clients beside its own threads: a client's environment,
    folder and streams reach the code that reads them as a value (config.Invocation), never
    set on the process."""
    found = [
        f"{name}: {match.group(0)}"
        for name, text in SOURCES.items()
        for match in PROCESS_WIDE.finditer(text)
    ]
    assert found == []
    assert PROCESS_WIDE.search('os.environ["X"] = "1"') and PROCESS_WIDE.search("os.chdir(d)")
    assert PROCESS_WIDE.search("os.environ.update(e)") and not PROCESS_WIDE.search("os.environ.get")
    assert PROCESS_WIDE.search("sys.stdout = x") and PROCESS_WIDE.search(
        "sys.stdout, sys.stderr = s"
    )
    assert PROCESS_WIDE.search("contextlib.redirect_stdout(f)")
    assert not PROCESS_WIDE.search("sys.stdout == x") and not PROCESS_WIDE.search("f(sys.stdout)")
    assert not PROCESS_WIDE.search("f(sys.stdout, file=sys.stderr)")
