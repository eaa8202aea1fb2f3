"""The notes as MCP resources and the prompts, driven as agents' clients drive them: the SDK's
ClientSession over stdio (`memsync mcp`) and over HTTP (`memsync serve`'s /mcp), and the real
MCP Inspector CLI against both."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types import PaginatedRequestParams

import memsync
from memsync.agent import prompts, resources
from memsync.config import load_config
from memsync.memory import Memory
from memsync.web.tokens import Tokens
from tests.agent.test_mcp import server_info, with_server
from tests.conftest import ROOT, VaultIndexer, free_port, write
from tests.daemon.test_serve_cli import _wait_until_served, serve
from tests.web.test_serve import serving, with_session

INDEXED = [
    "MEMORY.md",
    "daily/2026-11-28.md",
    "daily/2026-11-30.md",
    "daily/2026-12-02.md",
    "long.md",
    "notes/a b#1.md",
    "ops/runbook.md",
    "projects/heron.md",
    "tech/redis.md",
    "tech/ssh.md",
    "笔记/测试服务器.md",
]
INSPECTOR = ROOT / "clients" / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture
def vault_db(tmp_path: Path, indexed_vault: VaultIndexer) -> tuple[Path, Path]:
    """The agents' vault with daily notes and a note whose name needs quoting, indexed."""
    notes = {
        "daily/2026-11-28.md": "# 2026-11-28\n\n- Ordered the new keyboard.\n",
        "daily/2026-11-30.md": "# 2026-11-30\n\n- [ ] Renew the TLS certificate.\n",
        "daily/2026-12-02.md": "# 2026-12-02\n\n- Heron shipped. See [[heron]].\n",
        "notes/a b#1.md": "---\ntitle: Odd name\n---\nSee [[tech/redis]].\n",
    }
    db = tmp_path / "i.sqlite"
    return indexed_vault(notes=notes, db=db), db


async def every_page(session: ClientSession) -> list[tuple[list[Any], str | None]]:
    """resources/list walked by its cursor: each page's resources and the cursor it gave."""
    pages: list[tuple[list[Any], str | None]] = []
    cursor = None
    while True:
        listed = await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
        pages.append((listed.resources, listed.next_cursor))
        cursor = listed.next_cursor
        if cursor is None:
            return pages


def test_every_indexed_note_is_a_resource_with_its_title_size_and_date(
    vault_db: tuple[Path, Path],
) -> None:
    vault, db = vault_db
    [(listed, cursor)] = with_server(["--db", str(db)], every_page)
    assert cursor is None and [r.name for r in listed] == INDEXED
    odd = {r.name: r for r in listed}["notes/a b#1.md"]
    assert str(odd.uri) == "memsync://note/notes/a%20b%231.md" and odd.title == "Odd name"
    heron = {r.name: r for r in listed}["projects/heron.md"]
    assert heron.title == "Heron" and heron.mime_type == "text/markdown"
    assert heron.size == (vault / "projects/heron.md").stat().st_size
    assert heron.annotations is not None and heron.annotations.last_modified is not None
    assert heron.annotations.last_modified.endswith("Z")
    named = {r.name: r.title for r in listed}
    assert named["long.md"] == "long" and named["笔记/测试服务器.md"] == "测试服务器"


def test_resources_are_listed_in_pages_that_a_cursor_walks_over_http(
    vault_db: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, db = vault_db
    monkeypatch.setattr(resources, "PAGE_SIZE", 4)
    token = Tokens().add("agent")

    async def pages_and_a_bad_cursor(session: ClientSession) -> tuple[Any, str]:
        pages = await every_page(session)
        with pytest.raises(MCPError) as refused:
            await session.list_resources(params=PaginatedRequestParams(cursor="not!ours"))
        return pages, refused.value.error.message

    with serving(load_config(db=str(db)), None) as url:
        pages, refusal = with_session(url, token, pages_and_a_bad_cursor)
    assert [len(listed) for listed, _ in pages] == [4, 4, 3]
    assert [r.name for listed, _ in pages for r in listed] == INDEXED
    assert pages[-1][1] is None and all(cursor for _, cursor in pages[:-1])
    assert (
        refusal == "the cursor is not one this server gave: list the resources again from the start"
    )


def test_a_resource_is_read_from_disk_now_under_memory_get_s_rules_and_words(
    vault_db: tuple[Path, Path],
) -> None:
    vault, db = vault_db
    refused = ["../outside.md", "/etc/passwd.md", "drafts/secret.md", "nothere.md", "tech/"]
    refused += ["a\x00b.md", ".obsidian/workspace.md"]

    async def reads(session: ClientSession) -> tuple[list[Any], list[tuple[str, str]], Any]:
        write(vault, "tech/redis.md", "# Redis\n\nNow on port 6390.\n")  # not indexed yet
        texts = []
        for path in ("tech/redis.md", "notes/a b#1.md", "笔记/测试服务器.md"):
            read = await session.read_resource(resources.NOTE_URI + quote(path))
            texts.append(
                (str(read.contents[0].uri), read.contents[0].mime_type, read.contents[0].text)
            )
        errors = []
        for path in refused:
            with pytest.raises(MCPError) as failed:
                await session.read_resource(resources.NOTE_URI + quote(path, safe="/"))
            got = await session.call_tool("memory_get", {"path": path})
            errors.append((failed.value.error.message, got.content[0].text))
        templates = (await session.list_resource_templates()).resource_templates
        return texts, errors, templates

    texts, errors, templates = with_server(["--db", str(db)], reads)
    assert texts[0] == (
        "memsync://note/tech/redis.md",
        "text/markdown",
        "# Redis\n\nNow on port 6390.",
    )
    assert texts[1][2] == "---\ntitle: Odd name\n---\nSee [[tech/redis]]."
    assert texts[2][2].startswith("# 测试服务器")
    for resource_error, tool_error in errors:  # the SDK puts its words before the tool's
        assert tool_error == f"Error executing tool memory_get: {resource_error}"
    assert "is hidden or ignored" in errors[2][0] and "no note at nothere.md" in errors[3][0]
    [template] = templates
    assert template.uri_template == "memsync://note/{+path}"
    assert template.mime_type == "text/markdown"


def test_a_search_result_links_its_note_and_keeps_its_structured_output(
    vault_db: tuple[Path, Path],
) -> None:
    _, db = vault_db

    async def search(session: ClientSession) -> Any:
        return await session.call_tool("memory_search", {"query": "port", "mode": "keyword"})

    result = with_server(["--db", str(db)], search)
    found = [hit["path"] for hit in result.structured_content["results"]]
    links = [c for c in result.content if c.type == "resource_link"]
    assert result.content[0].type == "text" and len(found) >= 2
    assert [str(link.uri) for link in links] == [
        resources.note_uri(path) for path in dict.fromkeys(found)
    ]
    # the links ride beside the structured output, which holds no link
    assert set(result.structured_content) == {"query", "mode", "notices", "terms", "results"}


def _texts(result: Any) -> list[str]:
    """Each message's text: a text's, or an embedded note's uri and text."""
    out = []
    for message in result.messages:
        content = message.content
        assert message.role == "user"
        if content.type == "text":
            out.append(content.text)
        else:
            out.append(f"{content.resource.uri}\n{content.resource.text}")
    return out


def test_prompts_are_listed_with_described_arguments_and_hand_over_the_notes(
    vault_db: tuple[Path, Path],
) -> None:
    _, db = vault_db

    async def prompted(session: ClientSession) -> tuple[Any, dict[str, list[str]], str]:
        listed = (await session.list_prompts()).prompts
        got = {
            "recall": await session.get_prompt("recall", {"topic": "redis port"}),
            "note_with_links": await session.get_prompt("note_with_links", {"note": "[[Redis]]"}),
            "daily_review": await session.get_prompt(
                "daily_review", {"since": "2026-11-29", "until": "2026-12-02"}
            ),
        }
        with pytest.raises(MCPError) as refused:
            await session.get_prompt("daily_review", {"since": "last week"})
        return (
            listed,
            {name: _texts(result) for name, result in got.items()},
            refused.value.error.message,
        )

    listed, texts, refusal = with_server(["--db", str(db)], prompted)
    assert [p.name for p in listed] == ["recall", "note_with_links", "daily_review"]
    for prompt in listed:
        assert prompt.title and prompt.description and "\n" not in prompt.description
        for argument in prompt.arguments or []:
            assert len(argument.description or "") > 15, (prompt.name, argument.name)
    required = {p.name: [a.name for a in p.arguments or [] if a.required] for p in listed}
    assert required == {"recall": ["topic"], "note_with_links": ["note"], "daily_review": []}
    ask, cited = texts["recall"]
    assert "redis port" in ask and "tech/redis.md#L1-L3" in cited and "6380" in cited
    ask, note, links = texts["note_with_links"]
    assert (
        note == "memsync://note/tech/redis.md\n# Redis\n\nThe staging Redis listens on port 6380."
    )
    assert "notes/a b#1.md:4: See [[tech/redis]]." in links
    ask, *days = texts["daily_review"]
    assert "from 2026-11-29 to 2026-12-02" in ask
    assert [day.split("\n")[0] for day in days] == [
        "memsync://note/daily/2026-11-30.md",
        "memsync://note/daily/2026-12-02.md",
    ]
    assert "Renew the TLS certificate" in days[0]
    assert refusal.startswith("--since: 'last week' is not a date")


def test_the_daily_review_says_when_no_note_falls_in_the_range(
    vault_db: tuple[Path, Path],
) -> None:
    _, db = vault_db

    async def empty(session: ClientSession) -> list[str]:
        return _texts(
            await session.get_prompt("daily_review", {"since": "1999-01-01", "until": "1999-01-31"})
        )

    assert with_server(["--db", str(db)], empty) == [
        "I have no daily notes from 1999-01-01 to 1999-01-31: say so."
    ]


def test_daily_notes_are_chosen_by_their_names_oldest_first(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    days = ("daily/2026-12-02.md", "x/daily/2026-11-30.md", "memory/2026-11-01.md")
    notes = dict.fromkeys(days, "# a day\n")
    notes["b.md"] = "---\ndate: 2026-11-15\n---\n# dated, but no daily note\n"
    db = tmp_path / "i.sqlite"
    indexed_vault(tmp_path / "notes", notes=notes, db=db)
    with Memory.open(load_config(db=str(db))) as memory:
        assert memory.daily_notes("2026-11-02", "2026-12-31") == [
            ("x/daily/2026-11-30.md", 8),
            ("daily/2026-12-02.md", 8),
        ]
        assert [path for path, _ in memory.daily_notes("2026-11-01", "2026-11-30")] == [
            "memory/2026-11-01.md",
            "x/daily/2026-11-30.md",
        ]


def test_daily_notes_fit_in_the_review_s_room_in_date_order() -> None:
    assert prompts.fitting([10, 10, 10], room=25) == 2
    assert prompts.fitting([30, 10], room=25) == 1  # the first, whatever its size
    assert prompts.fitting([], room=25) == 0


def test_note_uris_and_cursors_round_trip() -> None:
    assert resources.note_uri("a b/c#d?.md") == "memsync://note/a%20b/c%23d%3F.md"
    for path in ("", "notes/a b#1.md", "笔记/x.md"):
        assert resources.after_cursor(resources.cursor_after(path) if path else None) == path


def test_the_server_s_version_is_the_installed_package_s(vault_db: tuple[Path, Path]) -> None:
    _, db = vault_db
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = re.search(r'^version = "(.+)"$', pyproject, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert memsync.__version__ == importlib.metadata.version("memsync") == declared
    assert with_server(["--db", str(db)], server_info) == ("memsync", declared)

    async def instructions(session: ClientSession) -> str | None:
        return (await session.initialize()).instructions

    assert "memsync://note/PATH" in (with_server(["--db", str(db)], instructions) or "")


# -- the real MCP Inspector CLI -------------------------------------------------------------


def inspector(*args: str) -> Any:
    """`mcp-inspector --cli ARGS` (Node from .ci/node.sh): its JSON result; a failure's JSON
    error envelope as {"error": ...}."""
    if not INSPECTOR.exists():
        why = "the MCP Inspector is not installed: . .ci/node.sh && npm ci --prefix clients"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    command = ['. "$0" >/dev/null && exec "$@"', str(ROOT / ".ci" / "node.sh"), str(INSPECTOR)]
    done = subprocess.run(
        ["bash", "-c", *command, "--cli", "--format", "json", "-q", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout.strip() or done.stderr.strip().splitlines()[-1]
    answer = json.loads(out)
    assert ("error" in answer) == (done.returncode != 0), done.stderr
    return answer.get("result", answer)


def _inspected(target: list[str], command: list[str]) -> dict[str, Any]:
    """What the Inspector CLI gets from each method memsync answers for resources and prompts:
    `target` its options naming the server, `command` a stdio server's command line."""

    def ask(*method: str) -> Any:
        return inspector(*target, *method, *(["--", *command] if command else []))

    note = "memsync://note/notes/a%20b%231.md"
    return {
        "resources/list": ask("--method", "resources/list"),
        "resources/templates/list": ask("--method", "resources/templates/list"),
        "resources/read": ask("--method", "resources/read", "--uri", note),
        "refused": ask("--method", "resources/read", "--uri", "memsync://note/../x.md"),
        "prompts/list": ask("--method", "prompts/list"),
        "prompts/get": ask(
            "--method", "prompts/get", "--prompt-name", "recall", "--prompt-args", "topic=ssh port"
        ),
    }


def _check_inspected(seen: dict[str, Any]) -> None:
    assert [r["name"] for r in seen["resources/list"]["resources"]] == INDEXED
    assert seen["resources/list"]["resources"][0]["mimeType"] == "text/markdown"
    [template] = seen["resources/templates/list"]["resourceTemplates"]
    assert template["uriTemplate"] == "memsync://note/{+path}"
    [content] = seen["resources/read"]["contents"]
    assert content["text"] == "---\ntitle: Odd name\n---\nSee [[tech/redis]]."
    assert content["mimeType"] == "text/markdown"
    assert "must not contain '..'" in seen["refused"]["error"]["message"]
    listed = seen["prompts/list"]["prompts"]
    assert [p["name"] for p in listed] == ["recall", "note_with_links", "daily_review"]
    assert all(a["description"] for p in listed for a in p["arguments"])
    ask, cited = (m["content"]["text"] for m in seen["prompts/get"]["messages"])
    assert "ssh port" in ask and "tech/ssh.md#L1-L3" in cited


def test_the_mcp_inspector_cli_lists_reads_and_prompts_over_stdio(
    vault_db: tuple[Path, Path],
) -> None:
    _, db = vault_db
    home = ["-e", f"MEMSYNC_HOME={os.environ['MEMSYNC_HOME']}"]  # it passes on few variables
    command = [sys.executable, "-m", "memsync", "mcp", "--db", str(db)]
    _check_inspected(_inspected(home, command))


def test_the_mcp_inspector_cli_lists_reads_and_prompts_from_memsync_serve_with_a_token(
    vault_db: tuple[Path, Path],
) -> None:
    vault, _ = vault_db
    token, port = Tokens().add("agent"), free_port()
    url = f"http://127.0.0.1:{port}"
    with serve(str(vault), "--listen", f"127.0.0.1:{port}") as process:
        _wait_until_served(url, token, process)
        deadline = time.monotonic() + 60
        while status(url, token)["files_indexed"] < len(INDEXED):  # its watcher's first pass
            assert time.monotonic() < deadline, "memsync serve did not index the vault"
            time.sleep(0.05)
        target = ["--transport", "http", "--server-url", f"{url}/mcp"]
        seen = _inspected([*target, "--header", f"Authorization: Bearer {token}"], [])
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    _check_inspected(seen)


def status(url: str, token: str) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx2.get(f"{url}/api/status", headers=headers).json()


def test_the_mcp_inspector_cli_walks_every_page_over_http_with_a_token(
    vault_db: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, db = vault_db
    monkeypatch.setattr(resources, "PAGE_SIZE", 3)  # four pages
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        target = ["--transport", "http", "--server-url", f"{url}/mcp"]
        seen = _inspected([*target, "--header", f"Authorization: Bearer {token}"], [])
        unauthorised = inspector(*target, "--method", "resources/list")
    _check_inspected(seen)
    assert "error" in unauthorised
