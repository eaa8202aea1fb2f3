"""`memsync serve` on real servers: uvicorn on 127.0.0.1 in this process, driven by the MCP SDK's
streamable HTTP client and by plain HTTP, for the tools, the tokens and concurrency."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

import memsync
from memsync.agent.server import MemoryServer
from memsync.cli.commands import main
from memsync.config import Config, load_config
from memsync.daemon.runner import bind, uvicorn_server
from memsync.memory import Memory
from memsync.web.app import make_app
from memsync.web.listen import Listen
from memsync.web.tokens import Tokens
from tests.agent.test_mcp import call_each, calls, server_info
from tests.conftest import MCP_HELLO, EmbeddingServer, agent_vault

PAGE = "/Pp1dlmLNaWqTNJ-Yt0mG2w"  # the page's folder (prefix.py makes one per installation)


@contextlib.contextmanager
def serving(config: Config, vault: Path | None, writable: bool = False) -> Iterator[str]:
    """A real server for the index of `config` on a free port: its base URL."""
    server = MemoryServer(
        config, lambda: Memory.open(config, vault, long_lived=True), writable, (), 2
    )
    hosts = frozenset({"127.0.0.1"})
    app = make_app(server, Tokens(), hosts=hosts, cookie="c", tls=False, slots=2, prefix=PAGE)
    sock = bind(Listen("127.0.0.1", 0))
    uvicorn = uvicorn_server(app)
    thread = threading.Thread(target=uvicorn.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not uvicorn.started and thread.is_alive():
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        uvicorn.should_exit = True
        thread.join()
        sock.close()
        server.close()


def with_session(
    url: str, token: str | None, use: Callable[[ClientSession], Awaitable[Any]]
) -> Any:
    """`use` an initialised MCP session over streamable HTTP, as an agent holding `token` would."""

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write_),
            ClientSession(read, write_) as session,
        ):
            await session.initialize()
            return await use(session)

    return anyio.run(run)


def tool_calls(url: str, token: str, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each (tool, arguments) in turn on one session: [(is_error, text, structured)]."""
    return list(with_session(url, token, lambda session: call_each(session, requests)))


READS = [
    ("memory_search", {"query": "redis port", "mode": "keyword"}),
    ("memory_get", {"path": "tech/ssh.md", "start_line": 3}),
    ("memory_tree", {}),
    ("memory_search", {"query": "", "mode": "keyword"}),
]


def test_the_sdk_client_with_a_token_gets_the_answers_stdio_gives(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        over_http = tool_calls(url, token, *READS)
    assert over_http == calls(["--db", str(db)], *READS)
    assert over_http[0][2]["results"][0]["path"] == "tech/redis.md"
    assert over_http[-1][0] and "the query is empty" in over_http[-1][1]


def test_the_server_names_itself_with_memsync_s_version_over_http_too(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        assert with_session(url, token, server_info) == ("memsync", memsync.__version__)


def test_the_sdk_client_without_a_token_or_with_a_wrong_one_is_refused(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    Tokens().add("agent")

    async def nothing(session: ClientSession) -> None:
        return None

    with serving(load_config(db=str(db)), None) as url:
        for token in (None, "memsync_wrong"):
            with pytest.raises(BaseException) as refused:  # noqa: B017 - the SDK's task group
                with_session(url, token, nothing)
            assert "Server returned an error response" in repr(refused.value)
            answer = httpx2.post(f"{url}/mcp", json={}, headers={"Host": "127.0.0.1"})
            assert answer.status_code == 401


def test_a_read_token_cannot_write_even_on_a_writable_server_and_is_told_why(
    indexed: tuple[Path, Path],
) -> None:
    vault, db = indexed
    reader, writer = Tokens().add("reader"), Tokens().add("writer", write=True)
    note = {"content": "- The VPN moved to port 1194.", "path": "inbox/vpn.md", "mode": "create"}

    async def tools_and_a_write(session: ClientSession) -> tuple[list[str], bool, str]:
        listed = [tool.name for tool in (await session.list_tools()).tools]
        result = await session.call_tool("memory_write", note)
        text = "\n".join(c.text for c in result.content if c.type == "text")
        return listed, bool(result.is_error), text

    with serving(load_config(db=str(db)), vault, writable=True) as url:
        listed, refused, why = with_session(url, reader, tools_and_a_write)
        assert "memory_write" not in listed and refused
        assert why == "memory_write needs a write token: memsync token add NAME --write"
        assert not (vault / "inbox/vpn.md").exists()
        listed, refused, why = with_session(url, writer, tools_and_a_write)
        assert "memory_write" in listed and not refused and why == "wrote inbox/vpn.md#L1-L1"
        found = tool_calls(url, reader, ("memory_search", {"query": "VPN", "mode": "keyword"}))
    assert found[0][2]["results"][0]["path"] == "inbox/vpn.md"


def test_a_running_server_refuses_a_token_revoked_meanwhile(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    token = Tokens().add("laptop")

    seen: list[str] = []

    async def before_and_after(session: ClientSession) -> None:
        await session.call_tool("memory_tree", {})
        seen.append("answered")
        assert CliRunner().invoke(main, ["token", "revoke", "laptop"]).exit_code == 0
        try:
            await session.call_tool("memory_tree", {})
            seen.append("answered after the revoke")
        except Exception as exc:  # noqa: BLE001 - what the client makes of a 401
            seen.append(repr(exc))

    with serving(load_config(db=str(db)), None) as url:
        with contextlib.suppress(BaseException):  # the session's close is refused too
            with_session(url, token, before_and_after)
        answer = httpx2.get(f"{url}/api/status", headers={"Authorization": f"Bearer {token}"})
    assert seen == ["answered", "MCPError(-32603, 'Server returned an error response', None)"]
    assert answer.status_code == 401


def test_a_slow_embedding_call_holds_up_no_other_client(
    tmp_path: Path, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one agent's question waits for its embedding, another client's calls are answered
    (each call has an index connection of its own)."""
    vault = agent_vault(tmp_path / "notes")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{embedding_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    db = tmp_path / "i.sqlite"
    done = CliRunner().invoke(main, ["index", str(vault), "--db", str(db), "--provider", "openai"])
    assert done.exit_code == 0, done.output
    token = Tokens().add("agent")
    headers = {"Authorization": f"Bearer {token}"}
    config = load_config(db=str(db), provider="openai", query_timeout=120)
    with serving(config, None) as url:
        embedding_server.delay = 120  # until `closing` is set below
        slow: list[Any] = []
        asking = threading.Thread(
            target=lambda: slow.extend(
                tool_calls(url, token, ("memory_search", {"query": "what is the SSH port"}))
            )
        )
        asking.start()
        deadline = time.monotonic() + 60
        while embedding_server.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert embedding_server.in_flight == 1
        status = httpx2.get(f"{url}/api/status", headers=headers)
        lines = httpx2.get(f"{url}/api/get?location=tech/ssh.md:3", headers=headers)
        tree = tool_calls(url, token, ("memory_tree", {}))
        still_waiting = asking.is_alive()
        embedding_server.closing.set()
        asking.join()
    assert status.status_code == 200 and lines.json()["text"].endswith("2222.")
    assert not tree[0][0] and still_waiting
    assert not slow[0][0] and slow[0][2]["results"]


def test_revoking_a_token_ends_the_mcp_stream_it_holds_open(indexed: tuple[Path, Path]) -> None:
    """The stream a client keeps open for the server's messages ends when its token does."""
    _, db = indexed
    token = Tokens().add("laptop")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    with serving(load_config(db=str(db)), None) as url, httpx2.Client(timeout=60) as http:
        opened = http.post(f"{url}/mcp", json=MCP_HELLO, headers=headers)
        session = {**headers, "mcp-session-id": opened.headers["mcp-session-id"]}
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(f"{url}/mcp", json=ready, headers=session).status_code == 202
        with http.stream("GET", f"{url}/mcp", headers=session) as stream:
            assert stream.status_code == 200
            assert CliRunner().invoke(main, ["token", "revoke", "laptop"]).exit_code == 0
            rest = b"".join(stream.iter_bytes())  # ends: a read timeout would fail the test
        assert b"memory" not in rest
        assert http.post(f"{url}/mcp", json=ready, headers=session).status_code == 401


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_token_file_the_server_may_only_read_still_admits_its_tokens(
    indexed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a token writes nothing: the last use it cannot note is said once in the log."""
    _, db = indexed
    tokens = Tokens()
    token = tokens.add("agent")
    tokens.path.chmod(0o400)
    tokens.path.parent.chmod(0o500)
    if os.geteuid() == 0:  # modes do not stop root: the write fails as they would make it fail

        def refused(*_: object) -> None:
            raise PermissionError(errno.EACCES, "Permission denied")

        monkeypatch.setattr("memsync.web.tokens.write_file", refused)
    log = _Lines()
    logging.getLogger("memsync.http").addHandler(log)
    try:
        with serving(load_config(db=str(db)), None) as url:
            headers = {"Authorization": f"Bearer {token}"}
            answers = [httpx2.get(f"{url}/api/status", headers=headers) for _ in range(3)]
            over_mcp = tool_calls(url, token, ("memory_tree", {}))
    finally:
        logging.getLogger("memsync.http").removeHandler(log)
        tokens.path.parent.chmod(0o700)
        tokens.path.chmod(0o600)
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert not over_mcp[0][0]
    unnoted = [line for line in log.lines if "last use" in line]
    assert unnoted == [
        f"tokens' last use is not noted: cannot write the token file {tokens.path}: "
        "Permission denied"
    ]
    assert Tokens().all()[0].last_used is None


def test_token_list_shows_the_last_use_a_server_noted(indexed: tuple[Path, Path]) -> None:
    """The first use is written at once; later ones in memory, written when the server stops."""
    _, db = indexed
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx2.get(f"{url}/api/status", headers=headers).status_code == 200
        first = Tokens().all()[0].last_used
        assert first is not None
        assert httpx2.get(f"{url}/api/status", headers=headers).status_code == 200
        assert Tokens().all()[0].last_used == first  # not rewritten on every request
    listed = CliRunner().invoke(main, ["token", "list", "--json"])
    last_used = json.loads(listed.output)["tokens"][0]["last_used"]
    assert last_used is not None and last_used > first


def test_a_token_holds_so_many_mcp_sessions_its_least_recently_used_idle_one_ended_first(
    indexed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that opens sessions and leaves them cannot fill the server's memory: one token's
    sessions are capped (2 here), an idle one is ended to make room, and with all busy the next
    is refused (429), for the SDK's client too; another token is not held up."""
    _, db = indexed
    monkeypatch.setattr("memsync.web.app.MAX_MCP_SESSIONS", 2)
    token, other = Tokens().add("agent"), Tokens().add("other")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    with serving(load_config(db=str(db)), None) as url, httpx2.Client(timeout=60) as http:

        def opened() -> dict[str, str]:
            answer = http.post(f"{url}/mcp", json=MCP_HELLO, headers=headers)
            assert answer.status_code == 200, answer.text
            session = {**headers, "mcp-session-id": answer.headers["mcp-session-id"]}
            assert http.post(f"{url}/mcp", json=ready, headers=session).status_code == 202
            return session

        first, second = opened(), opened()
        assert with_session(url, token, server_info)[0] == "memsync"  # the first made room
        assert http.post(f"{url}/mcp", json=ready, headers=first).status_code == 404
        assert http.post(f"{url}/mcp", json=ready, headers=second).status_code == 202
        third = opened()
        with (
            http.stream("GET", f"{url}/mcp", headers=second) as listening,
            http.stream("GET", f"{url}/mcp", headers=third) as also_listening,
        ):
            assert listening.status_code == also_listening.status_code == 200
            refused = http.post(f"{url}/mcp", json=MCP_HELLO, headers=headers)
            assert refused.status_code == 429
            assert refused.json()["error"].startswith("this token holds 2 MCP sessions, all busy")
            with pytest.raises(BaseException) as sdk_refused:  # noqa: B017 - the SDK's task group
                with_session(url, token, server_info)
            assert "Server returned an error response" in repr(sdk_refused.value)
            assert with_session(url, other, server_info)[0] == "memsync"
        deadline = time.monotonic() + 30  # until the server has seen the streams close
        while http.post(f"{url}/mcp", json=MCP_HELLO, headers=headers).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # one idle session was ended to make room: which one was used last depends on the order
        # in which the server saw the two streams close
        after = [
            http.post(f"{url}/mcp", json=ready, headers=s).status_code for s in (second, third)
        ]
        assert sorted(after) == [202, 404]


def test_a_token_file_others_could_write_meanwhile_is_a_503_and_one_log_line_not_a_trace(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    tokens = Tokens()
    token = tokens.add("agent")
    log = _Lines()
    logging.getLogger("memsync.http").addHandler(log)
    try:
        with serving(load_config(db=str(db)), None) as url:
            headers = {"Authorization": f"Bearer {token}"}
            assert httpx2.get(f"{url}/api/status", headers=headers).status_code == 200
            tokens.path.chmod(0o662)
            refused = httpx2.get(f"{url}/api/status", headers=headers)
            tokens.path.chmod(0o600)
            again = httpx2.get(f"{url}/api/status", headers=headers)
    finally:
        logging.getLogger("memsync.http").removeHandler(log)
    assert refused.status_code == 503 and refused.json() == {
        "error": "this server cannot check tokens now; see its log"
    }
    assert again.status_code == 200
    said = [line for line in log.lines if "cannot check a token" in line]
    assert said == [
        f"cannot check a token: the token file {tokens.path} can be written by other users, who "
        f"could add tokens of their own: chmod go-w {tokens.path}"
    ]


def test_a_write_token_s_browser_session_replayed_at_mcp_writes_nothing(
    indexed: tuple[Path, Path],
) -> None:
    """A session cookie taken by another server on this host is refused at /mcp and /api:
    agents send Bearer."""
    vault, db = indexed
    writer = Tokens().add("writer", write=True)
    mcp_headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
    }
    with serving(load_config(db=str(db)), vault, writable=True) as url, httpx2.Client() as http:
        login = http.post(f"{url}{PAGE}/login", data={"token": writer})
        assert login.status_code == 303 and f"Path={PAGE}/" in login.headers["set-cookie"]
        session = login.headers["set-cookie"].partition(";")[0]
        assert http.get(f"{url}{PAGE}/?q=redis").status_code == 200  # a valid session
        replayed = {"Cookie": session, "Origin": url}
        opened = httpx2.post(f"{url}/mcp", json=MCP_HELLO, headers={**mcp_headers, **replayed})
        search = httpx2.get(f"{url}/api/search?q=redis", headers=replayed)
        with_bearer = httpx2.post(
            f"{url}/mcp",
            json=MCP_HELLO,
            headers={**mcp_headers, "Authorization": f"Bearer {writer}"},
        )
    assert opened.status_code == 401 and "mcp-session-id" not in opened.headers
    assert search.status_code == 401 and "results" not in search.text
    assert with_bearer.status_code == 200  # the same token as an agent sends it


def test_a_request_uvicorn_cannot_parse_is_a_json_400(indexed: tuple[Path, Path]) -> None:
    """A path of raw UTF-8 bytes, not percent-encoded: refused by uvicorn's parser, before any
    route, in the API's JSON all the same."""
    _, db = indexed
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        port = int(url.rpartition(":")[2])
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(
                "GET /api/get?location=café.md HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\n\r\n".encode()
            )
            answer = b""
            while chunk := raw.recv(65536):
                answer += chunk
        encoded = httpx2.get(
            f"{url}/api/get?location=caf%C3%A9.md", headers={"Authorization": f"Bearer {token}"}
        )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"].startswith("Invalid HTTP request received.")
    assert encoded.status_code == 400 and encoded.json()["error"].startswith("no note at café.md")


def test_each_connection_of_the_served_socket_sends_its_answers_at_once() -> None:
    """asyncio turns Nagle off only where the accepted socket says TCP: without it, every answer
    after the first on a kept-alive connection (the Obsidian plugin's, curl's) waited for the
    client's delayed ACK, about 40 ms."""
    import asyncio

    sock = bind(Listen("127.0.0.1", 0))

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(
                writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            )
            writer.close()

        server = await asyncio.start_server(connected, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, 30)
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay())
