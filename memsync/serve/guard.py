"""The door of `memsync serve`: every request passes the Host and Origin checks (DNS rebinding,
other sites' pages) and shows a token, as `Authorization: Bearer` or as the session cookie a
browser got by opening the login address once; what gets in carries its token to the routes.

A session cookie holds a random id, never the token, and ends with its token: a revoked token
is refused from its next request on, whichever way it comes. The log names a request's method,
path (never its query, which may hold a token or a question), status and token name.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
import urllib.parse
from collections.abc import Awaitable
from http import HTTPStatus

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials
from starlette.datastructures import URL, Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import MemsyncError
from .listen import host_name, same_origin
from .page_routes import notice
from .tokens import Token, Tokens

log = logging.getLogger("memsync.http")
MAX_SESSIONS = 1000  # browser sessions kept; the oldest is logged out to make room
MACHINE_PATHS = ("/api/", "/mcp")
# the page's stylesheet and icon: the same bytes for everyone, and the login page needs them
PUBLIC_PATHS = ("/assets/",)
REVOKED_WITHIN = 1.0  # seconds: how soon an open stream ends after its token is revoked  # answered in JSON; anything else is the page's


class Visitor(AuthenticatedUser):
    """Who a request is: the token it showed, kind and all. The MCP SDK binds a session to the
    name (a session opened with one token is not the other's)."""

    def __init__(self, token: Token) -> None:
        super().__init__(AccessToken(token="", client_id=token.name, scopes=[token.kind]))
        self.token = token


class Sessions:
    """Browser sessions: a random id -> the token that opened it, in memory only (a restarted
    server asks the browser to log in again)."""

    def __init__(self) -> None:
        self._by_id: collections.OrderedDict[str, Token] = collections.OrderedDict()
        self._lock = threading.Lock()

    def open(self, token: Token) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._by_id[session] = token
            while len(self._by_id) > MAX_SESSIONS:
                self._by_id.popitem(last=False)
        return session

    def get(self, session: str) -> Token | None:
        with self._lock:
            return self._by_id.get(session)

    def end(self, session: str) -> None:
        with self._lock:
            self._by_id.pop(session, None)


def _machine(path: str) -> bool:
    return path.startswith(MACHINE_PATHS)


def refusal(
    path: str, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """An error as the asker reads it: JSON for the API and MCP, a short page for a browser."""
    if _machine(path):
        return JSONResponse({"error": message}, status, headers)
    return notice(status, HTTPStatus(status).phrase, message, headers)


LOGIN_HELP = (
    "Log in by opening the address memsync serve printed when it made your token "
    "(…/?token=…), or make a token with `memsync token add NAME` and open this address "
    "with ?token= and the token after it. Agents send it as the header Authorization: Bearer TOKEN."
)


class Guard:
    """ASGI middleware in front of every route."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: Tokens,
        hosts: frozenset[str],
        cookie: str,
        tls: bool,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.hosts = hosts
        self.cookie = cookie
        self.tls = tls
        self.sessions = Sessions()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # the lifespan
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, ended = 0, False

        async def noting(message: Message) -> None:
            nonlocal status, ended
            if message["type"] == "http.response.start":
                status = message["status"]
            ended = message["type"] == "http.response.body" and not message.get("more_body")
            await send(message)

        visitor = ""
        try:
            refused, token = self._admit(scope)
            if refused is not None:
                await refused(scope, receive, noting)
                return
            if token is None:  # a public asset
                await self.app(scope, receive, noting)
                return
            visitor = token.name
            scope["user"] = Visitor(token)
            scope["auth"] = AuthCredentials([token.kind])
            if await self._while_valid(token, self.app(scope, receive, noting)):
                return
            log.info("ended a response of %s: its token was revoked", token.name)
            if status and not ended:  # an open stream (MCP's): closed as a finished answer
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            log.info(
                "%s %s %s %s %.0f ms",
                scope.get("method", "-"),
                scope.get("path", ""),
                status or "-",
                visitor or "-",
                (time.perf_counter() - started) * 1000,
            )

    async def _while_valid(self, token: Token, answering: Awaitable[None]) -> bool:
        """Answer, unless `token` is revoked first: an answer that takes long (an MCP stream
        stays open for hours) ends then. False if it was cut short so."""
        revoked = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal revoked
                while self._still(token):
                    await anyio.sleep(REVOKED_WITHIN)
                revoked = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            await answering
            group.cancel_scope.cancel()
        return not revoked

    def _still(self, token: Token) -> bool:
        try:
            return self.tokens.still(token)
        except MemsyncError:  # the token file cannot be read: the next request says so
            return True

    def _admit(self, scope: Scope) -> tuple[Response | None, Token | None]:
        """(a refusal, None), (None, the token the request carries), or (None, None) for a
        public asset."""
        headers = Headers(scope=scope)
        path = scope.get("path", "")
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            return refusal(path, 403, f"this server does not answer to the host {host!r}"), None
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, host):
            return refusal(path, 403, "requests from other sites' pages are refused"), None
        if path.startswith(PUBLIC_PATHS) and scope.get("method") in ("GET", "HEAD"):
            return None, None
        try:
            return self._token(scope, headers, path)
        except MemsyncError as exc:  # the token file cannot be read
            log.error("cannot check a token: %s", exc)
            return refusal(path, 503, "this server cannot check tokens now; see its log"), None

    def _token(
        self, scope: Scope, headers: Headers, path: str
    ) -> tuple[Response | None, Token | None]:
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query and scope.get("method") == "GET" and not _machine(path):
            return self._login(scope, query["token"][-1]), None
        bearer = headers.get("authorization", "")
        if bearer:
            scheme, _, secret = bearer.partition(" ")
            token = self.tokens.verify(secret.strip()) if scheme.lower() == "bearer" else None
            if token is None:
                return self._unknown(path, "the token is not valid (revoked, or mistyped)"), None
            return None, self._used(token)
        session = cookie_parser(headers.get("cookie", "")).get(self.cookie)
        if session:
            token = self.sessions.get(session)
            if token is not None and self.tokens.still(token):
                return None, self._used(token)
            self.sessions.end(session)
            return self._unknown(
                path, "your session ended (its token was revoked)", clear=True
            ), None
        return self._unknown(path, "a token is needed"), None

    def _used(self, token: Token) -> Token:
        self.tokens.touch(token)
        return token

    def _unknown(self, path: str, why: str, clear: bool = False) -> Response:
        response = refusal(path, 401, f"{why}. {LOGIN_HELP}", {"WWW-Authenticate": "Bearer"})
        if clear:
            response.delete_cookie(self.cookie, path="/")
        return response

    def _login(self, scope: Scope, secret: str) -> Response:
        """The login address: the token becomes a session cookie, and the address loses it."""
        token = self.tokens.verify(secret)
        if token is None:
            return self._unknown(
                scope.get("path", "/"), "the token is not valid (revoked, or mistyped)"
            )
        url = URL(scope=scope)
        kept = [(k, v) for k, v in urllib.parse.parse_qsl(url.query) if k != "token"]
        target = url.path + (f"?{urllib.parse.urlencode(kept)}" if kept else "")
        response = RedirectResponse(target, 303)
        response.set_cookie(
            self.cookie,
            self.sessions.open(self._used(token)),
            httponly=True,
            samesite="strict",
            secure=self.tls,
            path="/",
        )
        return response
