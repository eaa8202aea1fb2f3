"""`memsync mcp` driven as an agent's client drives it: the protocol through the SDK's
ClientSession over stdio to a real subprocess (and raw lines on its stdin); the tools' logic
through the same server object in this process (`served`, `in_process`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import memsync
from memsync.cli.commands import main
from tests.conftest import MCP_HELLO, EmbeddingServer, VaultIndexer, agent_vault, write

# the tools a server lists without --writable, in the order it lists them
READ_TOOLS = [
    "memory_search",
    "memory_get",
    "memory_links",
    "memory_related",
    "memory_tree",
    "memory_status",
]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    keep = ("MEMSYNC_", "OPENAI_", "HOME", "XDG_")
    return {k: v for k, v in os.environ.items() if k.startswith(keep)} | (extra or {})


def with_server(
    args: list[str],
    use: Callable[[ClientSession], Awaitable[Any]],
    env: dict[str, str] | None = None,
) -> Any:
    """Start `memsync mcp ARGS`, hand an initialised session to `use`, return what it returns."""

    async def run() -> Any:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "memsync", "mcp", *args], env=_env(env)
        )
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write_),
                ClientSession(read, write_) as session,
            ):
                await session.initialize()
                return await use(session)

    return anyio.run(run)


def calls(
    args: list[str], *requests: tuple[str, dict[str, Any]], env: dict[str, str] | None = None
):  # type: ignore[no-untyped-def]
    """Each (tool, arguments) called in turn on one server: [(is_error, text, structured)]."""
    return with_server(args, lambda session: call_each(session, requests), env)


async def call_each(
    session: ClientSession, requests: tuple[tuple[str, dict[str, Any]], ...]
) -> list[tuple[bool, str, Any]]:
    """Each (tool, arguments) called in turn on a session: [(is_error, text, structured)]."""
    out = []
    for name, arguments in requests:
        result = await session.call_tool(name, arguments)
        text = "\n".join(c.text for c in result.content if c.type == "text")
        out.append((bool(result.is_error), text, result.structured_content))
    return out


@contextlib.contextmanager
def in_process(
    db: Path | str, writable: bool = False, **settings: Any
) -> Iterator[Callable[..., tuple[bool, str, Any]]]:
    """The server's tools called in this process, as the SDK calls them: (is_error, text, data);
    `settings` as `memsync mcp` takes them (name, protect)."""
    from mcp.server.mcpserver.exceptions import ToolError

    from memsync.agent.server import MemoryServer
    from memsync.config import load_config
    from memsync.memory import Memory

    config = load_config(db=str(db), **settings)
    server = MemoryServer(
        config, lambda: Memory.open(config, long_lived=True), writable, config.protect
    )

    def tool(name: str, **arguments: Any) -> tuple[bool, str, Any]:
        try:
            result = getattr(server, name)(**arguments)
        except ToolError as exc:
            return True, str(exc), None
        text = "\n".join(c.text for c in result.content if c.type == "text")
        return bool(result.is_error), text, result.structured_content

    try:
        yield tool
    finally:
        server.close()


def served(
    db: Path | str, *requests: tuple[str, dict[str, Any]], writable: bool = False, **settings: Any
) -> list[tuple[bool, str, Any]]:
    """Each (tool, arguments) called in turn on one server in this process, as `calls` calls
    them over stdio: for the tools' logic; the protocol has tests of its own."""
    with in_process(db, writable, **settings) as tool:
        return [tool(name, **arguments) for name, arguments in requests]


async def server_info(session: ClientSession) -> tuple[str, str]:
    """The name and version the server gave in its answer to initialize."""
    info = (await session.initialize()).server_info
    return info.name, info.version


def test_the_server_names_itself_with_memsync_s_version(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    assert with_server(["--db", str(db)], server_info) == ("memsync", memsync.__version__)


def test_tools_are_listed_with_schemas_and_write_only_when_writable(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed

    async def names(session: ClientSession) -> dict[str, bool]:
        listed = (await session.list_tools()).tools
        return {t.name: t.output_schema is not None for t in listed}

    async def names_and_a_write(session: ClientSession) -> tuple[dict[str, bool], bool, str]:
        result = await session.call_tool("memory_write", {"content": "x"})
        text = "\n".join(c.text for c in result.content if c.type == "text")
        return await names(session), bool(result.is_error), text

    read_only, error, text = with_server(["--db", str(db)], names_and_a_write)
    assert read_only == dict.fromkeys(READ_TOOLS, True)
    writable = with_server(["--db", str(db), "--writable"], names)
    assert writable == {**read_only, "memory_write": True}
    assert error and text == "memory_write is off: this server was started without --writable"


def test_tools_carry_hints_and_every_argument_is_described_in_a_fixed_order(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed

    async def listed(session: ClientSession) -> list[Any]:
        return (await session.list_tools()).tools

    tools = with_server(["--db", str(db), "--writable"], listed)
    assert [t.name for t in tools] == [*READ_TOOLS, "memory_write"]
    hints = {t.name: t.annotations for t in tools}
    reads = ("memory_search", "memory_get", "memory_links", "memory_related", "memory_tree")
    for name in (*reads, "memory_status"):
        assert hints[name].read_only_hint is True and hints[name].open_world_hint is False
    write_hints = hints["memory_write"]
    assert write_hints.read_only_hint is False and write_hints.destructive_hint is True
    assert write_hints.open_world_hint is False
    for tool in tools:
        for argument, schema in tool.input_schema.get("properties", {}).items():
            assert len(schema.get("description", "")) > 15, (tool.name, argument)
    search = {t.name: t for t in tools}["memory_search"].input_schema["properties"]
    assert "YYYY-MM-DD" in search["since"]["description"]
    assert "1-1000" in search["limit"]["description"]


def test_memory_search_returns_what_memsync_query_returns(
    tmp_path: Path,
    embedding_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
    indexed_vault: VaultIndexer,
) -> None:
    db = tmp_path / "i.sqlite"
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    monkeypatch.setenv("OPENAI_BASE_URL", env["OPENAI_BASE_URL"])  # the server's too
    indexed_vault(db=db, provider="openai", env=env)
    runner = CliRunner()
    asked = (("ssh port 2222", 3), ("heron postgres", 6), ("redis 6380", 2))
    answers = served(  # one server answers every request, as an agent's session does
        db,
        *[("memory_search", {"query": query, "limit": limit}) for query, limit in asked],
        ("memory_search", {"query": "port", "path": "tech/", "mode": "keyword"}),
        ("memory_search", {"query": "port", "tags": ["ops"], "mode": "keyword"}),
        ("memory_search", {"query": "port", "since": "last week"}),
    )
    for (query, limit), (error, text, found) in zip(asked, answers):
        cli = json.loads(
            runner.invoke(
                main, ["query", query, "--db", str(db), "-n", str(limit), "--json"], env=env
            ).stdout
        )
        assert not error and found["mode"] == cli["mode"] == "hybrid"
        assert [
            (r["path"], r["start_line"], r["end_line"], r["score"]) for r in found["results"]
        ] == [(r["path"], r["start_line"], r["end_line"], r["score"]) for r in cli["results"]]
        assert found["results"], (query, cli, found)
        top = found["results"][0]
        assert top["citation"] == f"{top['path']}#L{top['start_line']}-L{top['end_line']}"
        assert top["citation"] in text
        assert [(r["snippet"], r["snippet_start_line"]) for r in found["results"]] == [
            (r["snippet"], r["snippet_start_line"]) for r in cli["results"]
        ]
        assert top["hybrid_match"] == (
            top["vector_score"] is not None and top["text_score"] is not None
        )
    (_, _, within), (_, _, tagged), (bad, why, _) = answers[len(asked) :]
    assert within["results"] and all(r["path"].startswith("tech/") for r in within["results"])
    assert [r["path"] for r in tagged["results"]] == ["ops/runbook.md"]
    assert bad and "--since" in why


def test_memory_get_reads_ranges_from_disk_and_caps_long_reads(indexed: tuple[Path, Path]) -> None:
    vault, db = indexed
    (vault / "tech/redis.md").write_text("# Redis\n\nNow on port 6390.\n")  # fresher than the index
    results = served(
        db,
        ("memory_get", {"path": "tech/redis.md"}),
        ("memory_get", {"path": "long.md", "start_line": 10, "end_line": 12}),
        ("memory_get", {"path": "long.md"}),
        ("memory_get", {"path": "long.md", "start_line": 401}),
        ("memory_get", {"path": "long.md", "start_line": 2000}),
    )
    (e1, whole, data), (e2, some, part), (e3, capped, cut), (e4, _, rest), (e5, past, _) = results
    assert not (e1 or e2 or e3 or e4) and e5
    assert data["text"] == "# Redis\n\nNow on port 6390." and "3 | Now on port 6390." in whole
    assert part["text"] == "line 10\nline 11\nline 12" and "11 | line 11" in some
    assert cut["truncated"] and (cut["start_line"], cut["end_line"]) == (1, 400)
    assert "start_line=401" in capped and "start_line=401" in cut["note"]
    assert (rest["start_line"], rest["end_line"]) == (401, 800)
    assert "out of range" in past


@pytest.mark.parametrize(
    "path, why",
    [
        ("../outside.md", "'..'"),
        ("/etc/passwd", "relative to the vault"),
        ("~/notes.md", "relative to the vault"),
        ("link-out.md", "outside the vault"),
        (".obsidian/workspace.md", "hidden or ignored"),
        ("drafts/secret.md", "hidden or ignored"),
        ("tech/notes.txt", "not a Markdown note"),
        ("tech/\x00.md", "NUL"),
        ("a" * 300 + ".md", "too long"),
        ("nowhere.md", "no note at nowhere.md"),
    ],
)
def test_paths_outside_the_notes_are_refused_and_the_server_goes_on(
    indexed: tuple[Path, Path], tmp_path: Path, path: str, why: str
) -> None:
    """The tools in-process (the path check is the same code; the protocol is tested below)."""
    vault, db = indexed
    write(tmp_path, "outside.md", "SECRET outside the vault\n")
    os.symlink(tmp_path / "outside.md", vault / "link-out.md")
    with in_process(db, writable=True) as tool:
        error, text, _ = tool("memory_get", path=path)
        after, _, fine = tool("memory_get", path="tech/ssh.md", start_line=3, end_line=3)
        assert error and why in text and "SECRET" not in text and text.count("\n") == 0
        assert not after and fine["text"] == "The test server's SSH port is 2222."
        if path == "nowhere.md":
            return  # a write may create a note that does not exist yet
        werror, wtext, _ = tool("memory_write", content="x", path=path)
        assert werror and why in wtext and "SECRET" not in wtext
        assert (tmp_path / "outside.md").read_text() == "SECRET outside the vault\n"


def test_a_name_with_a_control_character_is_read_as_the_search_text_shows_it(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    """The text an agent reads shows `new\\nline.md`; reading that name back works, as the
    structured name does."""
    db = tmp_path / "i.sqlite"
    indexed_vault(notes={"new\nline.md": "# Quokkas\n\nquokkas smile\n"}, db=db)
    with in_process(db) as tool:
        _, text, data = tool("memory_search", query="quokkas")
        assert "new\\nline.md" in text and data["results"][0]["path"] == "new\nline.md"
        for name in ("new\\nline.md", "new\nline.md"):
            error, _, lines = tool("memory_get", path=name, start_line=3, end_line=3)
            assert not error and lines["text"] == "quokkas smile"
        error, text, _ = tool("memory_get", path="gone\nline.md")
        assert error and "gone\\nline.md" in text and "\n" not in text  # one line


def test_a_name_with_a_real_backslash_is_read_literally_beside_one_with_a_newline(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    """`new\\nline.md` (a backslash and `n`) beside a note whose name holds a real newline:
    over the SDK's client, each name reads its own note; the exact name wins over the escaped
    reading, even when the lines asked for are past its end."""
    db = tmp_path / "i.sqlite"
    notes = {
        "back\\x2e\\x2e.md": "# Wombats\n\nwombats dig\n",
        "new\\nline.md": "# Real backslash\n\nbackslash note\n",
        "new\nline.md": "# Newline\n\nnewline note\n\nmore\n",
    }
    indexed_vault(notes=notes, db=db)
    (
        (e1, _, wombats),
        (_, found, _),
        (e2, _, doubled),
        (e3, _, backslash),
        (e4, _, newline),
        (e5, past_end, _),
    ) = calls(
        ["--db", str(db)],
        ("memory_get", {"path": "back\\x2e\\x2e.md", "start_line": 3, "end_line": 3}),
        ("memory_search", {"query": "wombats"}),
        ("memory_get", {"path": "back\\\\x2e\\\\x2e.md", "start_line": 3, "end_line": 3}),
        ("memory_get", {"path": "new\\nline.md"}),
        ("memory_get", {"path": "new\nline.md"}),
        ("memory_get", {"path": "new\\nline.md", "start_line": 5, "end_line": 5}),
    )
    assert not e1 and wombats["text"] == "wombats dig"
    assert "back\\\\x2e\\\\x2e.md" in found  # the text form doubles the backslashes
    assert not e2 and doubled["text"] == "wombats dig"
    assert not e3 and backslash["path"] == "new\\nline.md" and "backslash note" in backslash["text"]
    assert not e4 and newline["path"] == "new\nline.md" and "newline note" in newline["text"]
    assert e5 and "out of range" in past_end and "more" not in past_end


@pytest.mark.parametrize(
    "query, why", [("  ", "the query is empty"), ("ssh port " * 20_000, "179,999 characters long")]
)
def test_an_empty_or_overlong_search_is_a_tool_error_and_the_server_goes_on(
    indexed: tuple[Path, Path], query: str, why: str
) -> None:
    _, db = indexed
    with in_process(db) as tool:
        error, text, _ = tool("memory_search", query=query)
        after, _, found = tool("memory_search", query="ssh port")
    assert error and why in text and text.count("\n") == 0
    assert not after and found["results"][0]["path"] == "tech/ssh.md"


def test_refused_paths_are_one_line_tool_errors_over_stdio_and_the_server_goes_on(
    indexed: tuple[Path, Path], tmp_path: Path
) -> None:
    vault, db = indexed
    write(tmp_path, "outside.md", "SECRET outside the vault\n")
    os.symlink(tmp_path / "outside.md", vault / "link-out.md")
    bad = ["../outside.md", "link-out.md", "tech/\x00.md", "a" * 300 + ".md"]
    results = calls(
        ["--db", str(db), "--writable"],
        *[("memory_get", {"path": path}) for path in bad],
        *[("memory_write", {"content": "x", "path": path}) for path in bad],
        ("memory_get", {"path": "tech/ssh.md", "start_line": 3, "end_line": 3}),
    )
    for error, text, _ in results[:-1]:
        assert error and "SECRET" not in text and text.count("\n") == 0
    assert not results[-1][0] and results[-1][2]["text"] == "The test server's SSH port is 2222."
    assert (tmp_path / "outside.md").read_text() == "SECRET outside the vault\n"


def test_memory_links_lists_links_with_citations_and_memory_get_follows_one(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    """Over stdio, as an agent calls them: a note named by path or alias, its links and its
    backlinks with citations; memory_get reads the section a link names, numbered as in the
    file, and a heading the note lacks is a one-line tool error listing its headings."""
    vault = agent_vault(tmp_path / "notes")
    write(
        vault,
        "projects/heron.md",
        "---\naliases: [Heron project]\n---\n# Heron\n\nHeron syncs with Postgres 16.\n"
        "## Conflicts\nLast writer wins.\n## Storage\nPostgres.\n",
    )
    write(vault, "ops/log.md", "# Log\n\nSee [[heron#Conflicts]] and [[Kafka]].\n")
    db = tmp_path / "i.sqlite"
    indexed_vault(vault, db=db)
    (e1, text, design), (e2, _, log), (e3, section, lines), (e4, missing, _), (e5, why, _) = calls(
        ["--db", str(db)],
        ("memory_links", {"path": "[[Heron project]]"}),
        ("memory_links", {"path": "ops/log.md"}),
        ("memory_get", {"path": "[[heron#Conflicts]]"}),
        ("memory_get", {"path": "[[heron#Nope]]"}),
        ("memory_links", {"path": "[[Nobody]]"}),
    )
    assert not (e1 or e2 or e3) and e4 and e5
    assert design["path"] == "projects/heron.md" and design["links"] == [] and design["more"] == ""
    [backlink] = design["backlinks"]
    assert backlink == {
        "path": "ops/log.md",
        "line": 3,
        "link": "[[heron#Conflicts]]",
        "kind": "link",
        "target": "heron",
        "anchor": "Conflicts",
        "resolved": "projects/heron.md",
        "citation": "ops/log.md#L3-L3",
        "text": "See [[heron#Conflicts]] and [[Kafka]].",
    }
    assert "ops/log.md:3: See [[heron#Conflicts]]" in text
    assert [(link["link"], link["resolved"]) for link in log["links"]] == [
        ("[[heron#Conflicts]]", "projects/heron.md"),
        ("[[Kafka]]", None),
    ]
    assert (lines["start_line"], lines["end_line"]) == (7, 8)
    assert lines["text"] == "## Conflicts\nLast writer wins."
    assert lines["citation"] == "projects/heron.md#L7-L8" and "7 | ## Conflicts" in section
    assert "\n" not in missing and missing.endswith(
        ": projects/heron.md has no heading 'Nope'; its headings: Heron, Conflicts, Storage"
    )
    assert "no note named 'Nobody'" in why and "\n" not in why


def test_memory_tree_lists_what_is_indexed(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    (e1, text, everything), (e2, _, tech), (e3, _, top) = served(
        db,
        ("memory_tree", {}),
        ("memory_tree", {"path": "tech"}),
        ("memory_tree", {"depth": 1}),
    )
    assert not (e1 or e2 or e3) and everything["more"] == ""
    paths = [n["path"] for n in everything["notes"]]
    assert "tech/redis.md" in paths and "笔记/测试服务器.md" in paths
    assert not any(p.startswith((".obsidian", "drafts")) for p in paths)
    assert all(n["chunks"] >= 1 and n["size"] > 0 for n in everything["notes"])
    assert [n["path"] for n in tech["notes"]] == ["tech/redis.md", "tech/ssh.md"]
    assert {n["path"] for n in top["notes"]} == {"MEMORY.md", "long.md"}
    assert {f["path"]: f["notes"] for f in top["folders"]} == {
        "ops": 1,
        "projects": 1,
        "tech": 2,
        "笔记": 1,
    }
    assert "tech/\n  redis.md  " in text and "笔记/\n  测试服务器.md" in text  # an indented tree


def test_memory_status_is_what_status_json_says(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    [(error, text, facts)] = served(db, ("memory_status", {}))
    cli = json.loads(CliRunner().invoke(main, ["status", "--db", str(db), "--json"]).stdout)
    assert not error and "state:" in text
    for key in ("vault", "files_indexed", "chunks", "text_up_to_date", "skipped"):
        assert facts[key] == cli[key], key
    # the index's backend, the same for both; keyword-only, neither keeps vectors in memory
    assert facts["vector_backend"] == cli["vector_backend"]
    assert cli["vector_backend"].startswith("sqlite-vec")
    assert facts["vectors_in_memory"] is cli["vectors_in_memory"] is False


def test_memory_write_appends_to_today_then_search_finds_it(indexed: tuple[Path, Path]) -> None:
    from datetime import date

    vault, db = indexed
    today = date.today().isoformat()
    (e1, said, first), (e2, _, second), (e3, _, found) = served(
        db,
        ("memory_write", {"content": "- Saw a quokka at the office"}),
        ("memory_write", {"content": "- And a second quokka\n- with a friend"}),
        ("memory_search", {"query": "quokka friend", "mode": "keyword"}),
        writable=True,
    )
    assert not (e1 or e2 or e3)
    daily = f"daily/{today}.md"
    assert (vault / daily).read_text() == (
        f"# {today}\n\n- Saw a quokka at the office\n- And a second quokka\n- with a friend\n"
    )
    assert first == {
        "path": daily,
        "start_line": 3,
        "end_line": 3,
        "citation": f"{daily}#L3-L3",
        "indexed": True,
    }
    assert (second["start_line"], second["end_line"]) == (4, 5) and f"{daily}#L3-L3" in said
    assert found["results"][0]["path"] == daily
    assert not list(vault.rglob(".memsync-*"))  # no temporary file left behind


def test_create_replace_line_endings_modes_and_protected_notes(indexed: tuple[Path, Path]) -> None:
    vault, db = indexed
    (vault / "crlf.md").write_bytes(b"# Windows\r\n\r\nold line\r\n")
    (vault / "crlf.md").chmod(0o600)
    results = served(
        db,
        ("memory_write", {"content": "new line", "path": "crlf.md"}),
        ("memory_write", {"content": "# New\n\nfresh", "path": "ideas/new.md", "mode": "create"}),
        ("memory_write", {"content": "again", "path": "ideas/new.md", "mode": "create"}),
        ("memory_write", {"content": "# Replaced\n", "path": "ideas/new.md", "mode": "replace"}),
        ("memory_write", {"content": "x", "path": "MEMORY.md"}),
        ("memory_write", {"content": "x", "path": "sub/AGENTS.md"}),
        ("memory_write", {"content": "x", "path": "projects/heron.md"}),
        ("memory_write", {"content": "x" * (300 * 1024), "path": "big.md"}),
        ("memory_write", {"content": "bad\x00bytes", "path": "nul.md"}),
        ("memory_write", {"content": "x", "path": "missing.md", "mode": "replace"}),
        writable=True,
        protect=("projects/*",),
    )
    errors = [e for e, _, _ in results]
    assert errors == [False, False, True, False, True, True, True, True, True, True]
    assert (vault / "crlf.md").read_bytes() == b"# Windows\r\n\r\nold line\r\nnew line\r\n"
    assert (vault / "crlf.md").stat().st_mode & 0o777 == 0o600
    assert results[0][2]["start_line"] == 4
    assert (vault / "ideas/new.md").read_text() == "# Replaced\n"
    assert (
        "exists" in results[2][1] and "protected" in results[4][1] and "protected" in results[6][1]
    )
    assert "256 KB" in results[7][1] and "not text" in results[8][1]
    assert (vault / "MEMORY.md").read_text().startswith("# MEMORY")
    assert not (vault / "big.md").exists()


def test_look_alikes_of_protected_notes_read_only_notes_and_ignored_folders_in_another_case_are_refused(
    indexed: tuple[Path, Path],
) -> None:
    vault, db = indexed
    locked = write(vault, "locked.md", "# Locked\n")
    locked.chmod(0o444)
    look_alikes = [
        "memory.md",
        "Memory.MD",
        "agents.md",
        "ＭＥＭＯＲＹ.md",
        "MEMORY\u200b.md",
        "\u202eMEMORY.md",
        "new\nline.md",
    ]
    results = served(
        db,
        *[("memory_write", {"content": "x", "path": name}) for name in look_alikes],
        ("memory_write", {"content": "x", "path": "locked.md"}),
        ("memory_write", {"content": "x", "path": "locked.md", "mode": "replace"}),
        ("memory_get", {"path": "DRAFTS/secret.md"}),
        ("memory_write", {"content": "x", "path": "Drafts/new.md"}),
        ("memory_write", {"content": "سلام", "path": "می\u200cخواهم.md"}),
        writable=True,
    )
    assert [e for e, _, _ in results] == [True] * 11 + [False]
    said = [text for _, text, _ in results]
    assert all("protected" in t for t in said[:4]), said[:4]
    assert all("invisible or control characters" in t for t in said[4:7]), said[4:7]
    assert all("locked.md is read-only" in t for t in said[7:9])
    assert all("hidden or ignored" in t for t in said[9:11])
    assert locked.read_text() == "# Locked\n"
    assert sorted(p.name for p in vault.iterdir() if p.is_file()) == [
        ".memsyncignore",
        "MEMORY.md",
        "locked.md",
        "long.md",
        "می\u200cخواهم.md",
    ]


def test_a_write_while_a_watcher_runs_is_indexed_by_the_watcher(indexed: tuple[Path, Path]) -> None:
    from memsync.config import load_config
    from memsync.store.locate import SqliteLocation
    from memsync.sync.watcher import Watcher

    vault, db = indexed
    watcher = Watcher(vault.resolve(), SqliteLocation(db), load_config(debounce_ms=100), None)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        assert watcher.ready.wait(15)
        (error, _, written), (_, _, found) = served(
            db,
            ("memory_write", {"content": "- walrus on the roof", "path": "log.md"}),
            ("memory_search", {"query": "walrus", "mode": "keyword"}),
            writable=True,
        )
        assert not error and written["indexed"] is True
        assert [r["path"] for r in found["results"]] == ["log.md"]
    finally:
        watcher.request_stop()
        thread.join(15)


def test_a_vault_never_indexed_is_indexed_for_the_session_then_only_read(tmp_path: Path) -> None:
    """A one-step install's first start (no shell ran `memsync index`): the session indexes the
    vault before its first answer and keeps the index; the next start reads it as always."""
    vault = agent_vault(tmp_path / "notes")
    env = {"MEMSYNC_PROVIDER": "none"}
    ask = ("memory_search", {"query": "test server SSH port", "mode": "keyword"})
    [(error, _, found), (_, _, status)] = calls(
        ["--vault", str(vault)], ask, ("memory_status", {}), env=env
    )
    assert not error and found["results"][0]["path"] == "tech/ssh.md"
    assert status["files_indexed"] == 7 and status["writer"]["role"] == "mcp"
    [(_, _, status)] = calls(["--vault", str(vault)], ("memory_status", {}), env=env)
    assert status["files_indexed"] == 7 and status["writer"] is None


def test_a_missing_index_is_reported_not_crashed_on(tmp_path: Path) -> None:
    (error, text, _), (again, _, _) = served(
        tmp_path / "none.sqlite",
        ("memory_search", {"query": "x"}),
        ("memory_status", {}),
    )
    assert error and again and "no index at" in text


@pytest.mark.parametrize("ending", ["stdin", "SIGTERM", "SIGINT"])
def test_the_server_exits_0_when_stdin_closes_or_on_a_signal(
    indexed: tuple[Path, Path], ending: str
) -> None:
    _, db = indexed
    process = subprocess.Popen(
        [sys.executable, "-m", "memsync", "mcp", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        assert process.stderr is not None and process.stdin is not None
        assert "serving MCP" in process.stderr.readline().decode()  # started: stdout stays clean
        if ending == "stdin":
            process.stdin.close()
        else:
            process.send_signal(getattr(signal, ending))
        assert process.wait(timeout=20) == 0
        assert process.stdout.read() == b""  # type: ignore[union-attr]
    finally:
        process.kill()
        process.wait(10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


@pytest.fixture
def pg_indexed(pg_vault: tuple[str, str], indexed_vault: VaultIndexer) -> tuple[str, str]:
    """The test vault indexed, keyword-only, into a fresh vault of the test server, on this
    machine (where the servers run, so they may write): (URL, name)."""
    url, name = pg_vault
    indexed_vault(db=url, flags=("--name", name), host=socket.gethostname())
    return url, name


def test_an_agent_reads_and_writes_a_vault_kept_in_postgresql(
    pg_indexed: tuple[str, str],
) -> None:
    url, name = pg_indexed
    found, written, again, status = served(
        url,
        ("memory_search", {"query": "ssh port", "limit": 3}),
        ("memory_write", {"path": "inbox/new.md", "content": "# New\n\nthe zeppelin hangar\n"}),
        ("memory_search", {"query": "zeppelin"}),
        ("memory_status", {}),
        writable=True,
        name=name,
    )
    assert not found[0] and found[2]["results"][0]["path"] == "tech/ssh.md"
    assert not written[0] and again[2]["results"][0]["path"] == "inbox/new.md"
    assert status[2]["files_indexed"] == 8 and "pgvector" in status[2]["vector_backend"]
    assert not status[2]["vectors_in_memory"]  # keyword-only: no vectors to keep
    assert name in status[2]["db"] and "@" in status[2]["db"]


def test_the_server_reconnects_after_postgresql_drops_its_connections(
    pg_indexed: tuple[str, str],
) -> None:
    import psycopg

    url, name = pg_indexed
    outcomes = []
    with in_process(url, name=name) as tool:
        for attempt in range(3):
            if attempt == 1:  # as a server restart would: every memsync session ends
                with psycopg.connect(url, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'memsync' AND pid <> pg_backend_pid()"
                    )
            error, _, found = tool("memory_search", query="ssh port")
            outcomes.append(not error and bool(found["results"]))
    first, during, after = outcomes
    assert first and after  # the call that met the dropped connection may fail, the next works


def _raw_call(request_id: object, tool: str, arguments: dict[str, Any]) -> str:
    params = {"name": tool, "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message)


def _raw_answers(db: Path, lines: list[str], count: int) -> list[Any]:
    """The first `count` lines `memsync mcp` writes for these lines (after the initialize
    handshake), then stdin closed: the server must exit 0 without a traceback."""
    started = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    handshake = [json.dumps(MCP_HELLO), json.dumps(started)]
    server = subprocess.Popen(
        [sys.executable, "-m", "memsync", "mcp", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("\n".join(handshake + lines) + "\n")
    server.stdin.flush()
    timer = threading.Timer(60, server.kill)  # a missing answer fails the test, not the suite
    timer.start()
    answers = [json.loads(server.stdout.readline() or "null") for _ in range(count + 1)]
    timer.cancel()
    _, stderr = server.communicate(timeout=30)  # closes stdin: the server exits
    assert server.returncode == 0 and "Traceback" not in stderr
    return answers[1:]


def test_every_line_gets_an_answer_lone_surrogates_and_lines_that_are_not_json_included(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    lines = [
        _raw_call(2, "memory_search", {"query": "\ud800 redis port", "mode": "keyword"}),
        "this is not json",
        _raw_call(3, "memory_search", {"query": "port", "since": "99999m"}),
        _raw_call(4, "memory_get", {"path": "\udfff.md"}),
        _raw_call(5, "memory_status", {}),
    ]
    answers = _raw_answers(db, lines, 5)
    by_id = {a.get("id"): a for a in answers if a}
    assert sorted(by_id, key=str) == [2, 3, 4, 5, None]
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[2]["result"]["isError"] is False
    assert by_id[2]["result"]["structuredContent"]["results"][0]["path"] == "tech/redis.md"
    assert by_id[3]["result"]["isError"] is True
    assert "'99999m' is not a date: use YYYY-MM-DD" in by_id[3]["result"]["content"][0]["text"]
    assert by_id[4]["result"]["isError"] is True
    assert by_id[5]["result"]["isError"] is False


def test_a_request_with_an_invalid_id_or_nested_too_deeply_gets_an_error_answer(
    indexed: tuple[Path, Path],
) -> None:
    """A JSON-RPC id is an integer or a string: the SDK took a request with another for a
    notification and answered nothing; one nested deeper than it parses was a parse error with
    id null, its own id readable at its top level."""
    _, db = indexed
    # with an escape, which the lone-surrogate pass reads
    deep = '{"x":' * 5000 + '"caf\\u00e9"' + "}" * 5000
    lines = [
        _raw_call({"an": "object"}, "memory_status", {}),
        _raw_call(1.5, "memory_status", {}),
        '{"jsonrpc": "2.0", "method": "tools/call", "params": ' + deep + ', "id": "deep"}',
        '{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": [' + deep + "]}}",
        json.dumps({"jsonrpc": "2.0", "id": 7}),
        _raw_call(8, "memory_status", {}),
    ]
    answers = _raw_answers(db, lines, 6)
    errors = [(a["id"], a["error"]["code"], a["error"]["message"]) for a in answers if "error" in a]
    assert sorted(errors, key=str) == sorted(
        [
            (None, -32600, "Invalid Request: an id is an integer or a string"),
            (None, -32600, "Invalid Request: an id is an integer or a string"),
            ("deep", -32600, "Invalid Request: nested too deeply"),
            (6, -32600, "Invalid Request: nested too deeply"),
            (7, -32600, "Invalid Request: not a JSON-RPC message"),
        ],
        key=str,
    )
    assert [a["id"] for a in answers if "result" in a] == [8]


def test_a_configured_limit_reaches_the_agent_unless_it_asks_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, indexed_vault: VaultIndexer
) -> None:
    otters = {
        f"otter-{n}.md": f"# Otter {n}\n\notters hold hands while they sleep\n" for n in range(4)
    }
    db = tmp_path / "i.sqlite"
    indexed_vault(tmp_path / "notes", notes=otters, db=db)
    monkeypatch.setenv("MEMSYNC_LIMIT", "2")
    with in_process(db) as tool:
        assert len(tool("memory_search", query="otters sleep")[2]["results"]) == 2
        assert len(tool("memory_search", query="otters sleep", limit=3)[2]["results"]) == 3
        error, text, _ = tool("memory_search", query="otters", limit=0)
        assert error and text == "limit must be between 1 and 1000, not 0"  # as the API says


def test_connections_are_lent_in_the_order_calls_asked_for_them() -> None:
    """A connection given back goes to the call that waited longest, never to one that asks
    later: under many clients no call is passed over again and again."""
    import queue
    import threading
    import time

    from memsync.agent.lending import Turns

    turns = Turns(1)
    held = turns.take()
    order: list[str] = []
    proceed = threading.Event()

    def wait_for_a_turn(name: str) -> None:
        slot = turns.take()
        order.append(name)
        proceed.wait()
        turns.give(slot)

    waiters = []
    for name in ("first", "second"):
        waiter = threading.Thread(target=wait_for_a_turn, args=(name,))
        waiter.start()
        waiters.append(waiter)
        deadline = time.monotonic() + 60  # until it waits in line: then the next one asks
        while len(turns._waiting) < len(waiters):
            assert time.monotonic() < deadline, "a waiter never asked for its turn"
            time.sleep(0.01)
    turns.give(held)  # handed to the first waiter, not left for whoever asks next
    with pytest.raises(queue.Empty):
        turns.take(timeout=0.05)
    proceed.set()
    for waiter in waiters:
        waiter.join()
    assert order == ["first", "second"]
    assert turns.take(timeout=0) == held  # free again once everyone is done
