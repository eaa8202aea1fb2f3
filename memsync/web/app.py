"""`memsync serve`'s routes: /mcp (the MCP tools over streamable HTTP, as `memsync mcp` serves
them on stdio), /api/search, /api/get, /api/related, /api/links and /api/status (what `query
--json`, `get`, `related --json`, `links --json` and `status --json` print), and the search page's routes under its folder, all behind the Guard.

Each API route parses, makes one call on the library face through the MemoryServer's index
connections (one call per connection at a time, in a worker thread, so that one slow embedding
or reranker call holds up no other request) and renders with the CLI's renderers.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecuritySettings
from starlette.applications import Starlette
from starlette.datastructures import Headers, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import output
from ..agent.server import MemoryServer, build
from ..errors import MemsyncError
from ..memory import (
    RELATED_LIMIT,
    Memory,
    NoteRequest,
    note_request,
    search_options,
    search_request,
)
from ..shapes import RelatedResult
from . import page_routes
from .guard import Guard, Visitor, refusal
from .page_routes import status_of
from .tokens import Token, Tokens

log = logging.getLogger("memsync.http")
MAX_BODY = 1024 * 1024  # bytes: an agent's request or a note it writes; more is refused (413)
# the query parameters that set a search's numbers and switches, as `memsync query` names them
SEARCH_SETTINGS = {"n": "limit", "min_score": "min_score", "mode": "mode"}
SEARCH_SWITCHES = ("decay", "mmr")


def _filters(params: QueryParams) -> dict[str, Any]:
    """Which notes /api/search and /api/related may return, as `--path`, `--since`, `--until`
    and `--tag` say it: `path` and `tag` repeatable."""
    return {
        "paths": params.getlist("path"),
        "since": params.get("since"),
        "until": params.get("until"),
        "tags": params.getlist("tag"),
    }


# MCP sessions one token may hold open: each idle one keeps ~37 KB for the SDK's 30 minutes, so
# one token opening sessions in a loop must not fill the memory; the least recently used idle
# one is ended to make room, and with none idle a new one is refused (429)
MAX_MCP_SESSIONS = 100
SESSION_HEADER = "mcp-session-id"


def _json(value: Any, status: int = 200) -> Response:
    return Response(output.as_json(value), status, media_type="application/json")


class Api:
    """The JSON routes over one MemoryServer's index connections."""

    def __init__(self, server: MemoryServer, slots: int) -> None:
        self.server = server
        self.limiter = anyio.CapacityLimiter(slots)  # threads beyond the connections would wait

    async def answer(self, request: Request, work: Callable[[Memory], Any]) -> Response:
        """One call on the face in a worker thread: memsync's errors as JSON with the CLI's
        message; anything else logged with its trace, and a line saying so to the client."""

        try:
            return _json(await anyio.to_thread.run_sync(self.borrowing, work, limiter=self.limiter))
        except MemsyncError as exc:
            return _json({"error": output.escape_controls(str(exc))}, status_of(exc))
        except Exception as exc:
            log.exception("%s failed", request.url.path)
            message = (
                f"{request.url.path} failed unexpectedly ({exc.__class__.__name__}); see the log"
            )
            return _json({"error": message}, 500)

    def borrowing(self, work: Callable[[Memory], Any]) -> Any:
        """`work` on one of the server's index connections (in a worker thread)."""
        with self.server.connections.borrowed() as memory:
            return work(memory)

    def searching(
        self,
        text: str,
        paths: Sequence[str],
        since: str | None,
        until: str | None,
        tags: Sequence[str],
        **settings: str | None,
    ) -> Callable[[Memory], Any]:
        """A search as /api/search and the page ask it: the filters, and settings as text."""

        def work(memory: Memory) -> Any:
            asked = search_request(
                self.server.config,
                text,
                paths=paths,
                since=since,
                until=until,
                tags=tags,
                explain=False,
                **settings,
            )
            return memory.search(asked.text, asked.options).as_dict()

        return work

    async def search(self, request: Request) -> Response:
        params = request.query_params
        settings: dict[str, Any] = {name: params.get(name) for name in SEARCH_SWITCHES}
        settings |= {setting: params.get(name) for name, setting in SEARCH_SETTINGS.items()}
        work = self.searching(params.get("q", ""), **_filters(params), **settings)
        return await self.answer(request, work)

    def relating(
        self,
        location: str,
        paths: Sequence[str] = (),
        since: str | None = None,
        until: str | None = None,
        tags: Sequence[str] = (),
        n: str | None = None,
    ) -> Callable[[Memory], RelatedResult]:
        """Related notes as /api/related and the page ask for them: RELATED_LIMIT unless `n`
        (text, read as query's -n) says how many."""

        def work(memory: Memory) -> RelatedResult:
            options = search_options(
                self.server.config,
                paths=paths,
                since=since,
                until=until,
                tags=tags,
                limit=RELATED_LIMIT if n is None else n,
            )
            return output.related_result(memory.related(note_request(location), options))

        return work

    async def related(self, request: Request) -> Response:
        params = request.query_params
        work = self.relating(params.get("location", ""), **_filters(params), n=params.get("n"))
        return await self.answer(request, work)

    async def links(self, request: Request) -> Response:
        location = request.query_params.get("location", "")
        return await self.answer(request, lambda memory: output.links_data(memory.links(location)))

    def page(self) -> list[BaseRoute]:
        """The search page's routes, over the same calls on the same index connections."""

        def search(text: str, **filters: Any) -> Any:
            return self.borrowing(self.searching(text, **filters))

        def get(asked: NoteRequest) -> Any:
            def read(memory: Memory) -> Any:
                found = memory.read_location(asked, capped=False)
                nearby = self._nearby(memory, found.path)
                if asked.whole_note:
                    return found.as_dict(), None, None, nearby
                whole = memory.read(found.path, capped=False)
                return whole.as_dict(), found.start_line, found.end_line, nearby

            return self.borrowing(read)

        def status() -> Any:
            return self.borrowing(lambda memory: memory.glance())

        return page_routes.routes(search, get, status)

    def _nearby(self, memory: Memory, path: str) -> page_routes.Nearby:
        """What a note's view lists beside its lines: its related notes, and apart from them its
        links and backlinks; each one's error instead, where it has one (the note still shows)."""
        nearby: page_routes.Nearby = {}
        try:
            nearby["related"] = self.relating(path)(memory)
        except MemsyncError as exc:
            nearby["related_error"] = str(exc)
        try:
            nearby["links"] = output.links_data(memory.links(path))
        except MemsyncError as exc:
            nearby["links_error"] = str(exc)
        return nearby

    async def get(self, request: Request) -> Response:
        location = request.query_params.get("location", "")

        def work(memory: Memory) -> Any:
            return memory.read_location(note_request(location), capped=False).as_dict()

        return await self.answer(request, work)

    async def status(self, request: Request) -> Response:
        return await self.answer(request, lambda memory: memory.status())


class McpRoute:
    """/mcp: the MCP SDK's streamable HTTP transport, with memory_write offered only to a write
    token on a --writable server (a read token's session has no such tool to call), and at most
    MAX_MCP_SESSIONS sessions a token.

    The sessions are counted here from what passes (the SDK keeps its own to itself): the id an
    answer to initialize gives, the requests in flight on each (an open stream is one), and the
    end a DELETE or a 404 says. A session the SDK ended when it sat idle is still counted, as
    the least recently used: it is the first ended to make room, which costs nothing."""

    def __init__(self, server: MemoryServer) -> None:
        self.readers = self._manager(server, read_only=True)
        self.writers = self._manager(server, read_only=False) if server.writable else None
        # token digest -> {session id: requests in flight}, least recently used first
        self.sessions: dict[str, collections.OrderedDict[str, int]] = {}
        self.opening: collections.Counter[str] = collections.Counter()  # token digest -> count

    @staticmethod
    def _manager(server: MemoryServer, read_only: bool) -> StreamableHTTPSessionManager:
        app = build(server, read_only=read_only)
        app.streamable_http_app(  # makes the app's session manager; the Guard checks hosts
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=MAX_BODY,
        )
        return app.session_manager

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for manager in (self.readers, self.writers):
                if manager is not None:
                    await stack.enter_async_context(manager.run())
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        visitor = scope["user"]
        assert isinstance(visitor, Visitor)  # the Guard let nobody else in
        writes = visitor.token.writes and self.writers is not None
        manager = self.writers if writes and self.writers else self.readers
        session = Headers(scope=scope).get(SESSION_HEADER)
        if session is None:
            await self._open(manager, visitor.token, scope, receive, send)
        else:
            await self._within(manager, visitor.token.sha256, session, scope, receive, send)

    async def _open(
        self,
        manager: StreamableHTTPSessionManager,
        token: Token,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """A request without a session (an initialize), room made for the session it opens."""
        key = token.sha256
        held = self.sessions.setdefault(key, collections.OrderedDict())
        if len(held) + self.opening[key] >= MAX_MCP_SESSIONS:
            idle = next((session for session, busy in held.items() if not busy), None)
            if idle is None:
                message = (
                    f"this token holds {MAX_MCP_SESSIONS} MCP sessions, all busy: end one (a "
                    "client ends its session when it closes) before opening another"
                )
                await refusal(scope["path"], 429, message)(scope, receive, send)
                return
            del held[idle]
            log.info("ended the least recently used idle MCP session of %s", token.name)
            await self._end(manager, idle, scope)
        self.opening[key] += 1
        opened: str | None = None  # the session this answer opened: counted in `held` from then

        async def noting(message: Message) -> None:
            nonlocal opened
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened = Headers(raw=message["headers"]).get(SESSION_HEADER)
                if opened is not None:
                    self.opening[key] -= 1
                    held[opened] = 1  # this answer is in flight
            await send(message)

        try:
            await manager.handle_request(scope, receive, noting)
        finally:
            if opened is None:
                self.opening[key] -= 1
            elif opened in held:
                held[opened] -= 1

    async def _within(
        self,
        manager: StreamableHTTPSessionManager,
        key: str,
        session: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """A request in a session: in flight while it is answered, its end noted."""
        held = self.sessions.get(key, collections.OrderedDict())
        if session not in held:  # another token's, or one that ended: the SDK says 404
            await manager.handle_request(scope, receive, send)
            return
        held[session] += 1
        held.move_to_end(session)
        status = 0

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await manager.handle_request(scope, receive, noting)
        finally:
            if session in held:
                held[session] -= 1
                if status == 404 or (scope["method"] == "DELETE" and status < 400):
                    del held[session]

    @staticmethod
    async def _end(manager: StreamableHTTPSessionManager, session: str, scope: Scope) -> None:
        """End `session` as its client would, by a DELETE with its id (and its token)."""
        ending = {
            **scope,
            "method": "DELETE",
            "query_string": b"",
            "headers": [(SESSION_HEADER.encode(), session.encode("latin-1"))],
        }

        async def no_body() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def unheard(message: Message) -> None:
            return None

        await manager.handle_request(ending, no_body, unheard)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, another method) as the Guard's are, and a bug
    in one line (Starlette logs its trace)."""
    path = request.url.path
    if not isinstance(exc, HTTPException):
        return refusal(path, 500, f"{path} failed unexpectedly; see the log")
    message = f"nothing at {path}" if exc.status_code == 404 else str(exc.detail)
    return refusal(path, exc.status_code, message)


def make_app(
    server: MemoryServer,
    tokens: Tokens,
    *,
    hosts: frozenset[str],
    cookie: str,
    tls: bool,
    slots: int,
    prefix: str,
) -> ASGIApp:
    """The whole server: the API, MCP and the search page (under `prefix`, its folder: see
    prefix.py), behind one Guard."""
    api = Api(server, slots)
    mcp = McpRoute(server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with mcp.running():
                yield
        finally:
            tokens.flush()  # the last uses noted since the last write, where it can be written

    routes: list[BaseRoute] = [
        Route("/api/search", api.search, methods=["GET"]),
        Route("/api/get", api.get, methods=["GET"]),
        Route("/api/related", api.related, methods=["GET"]),
        Route("/api/links", api.links, methods=["GET"]),
        Route("/api/status", api.status, methods=["GET"]),
        Route("/mcp", mcp),
        Mount(prefix, routes=api.page()),
    ]
    errors = {HTTPException: _http_error, Exception: _http_error}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=errors)
    return Guard(RequestBodyLimitMiddleware(app, MAX_BODY), tokens, hosts, cookie, tls, prefix)
