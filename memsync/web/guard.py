"""The door of `memsync serve`: every request passes the Host and Origin checks (DNS rebinding,
other sites' pages; Obsidian's own origin only to the API and MCP, with a token) and shows a token: /api and /mcp as `Authorization: Bearer` only; the page,
which lives under a folder of its own (the prefix), also as the session cookie a browser got at
its login address. Any other address is refused. What gets in carries its token to the routes.

A browser sends a host's cookies to each of its ports, so any other server on this machine a
browser visits would be sent a session cookie bound to "/": this one is bound to the page's
folder, an unguessable name per installation, never shown to a visitor without a token, and it
is taken nowhere else. It holds a random id, never the token, ends with its token (a revoked
token is refused from its next request on, whichever way it comes) and after SESSION_IDLE
unused. The log names a request's method, path (never its query, which may hold a token or a
question, nor the page's folder, nor an address elsewhere, which may be the folder's name
mistyped), status and token name.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import MemsyncError
from .listen import host_name, same_origin
from .page_routes import login_form, notice
from .tokens import Token, Tokens

log = logging.getLogger("memsync.http")
# browser sessions one token holds; its least recently used is logged out to make room (one
# token's logins in a loop log out no other token's sessions)
MAX_SESSIONS = 100
# seconds a browser session lasts unused: a forgotten tab does not stay logged in for good
SESSION_IDLE = 12 * 3600
MACHINE_PATHS = ("/api/", "/mcp")  # answered in JSON, to a Bearer token only
LOGIN = "/login"  # under the page's folder: GET ?token= (the address serve prints), or POST
ASSETS = "/assets/"  # under the page's folder: the same bytes for everyone; the login page's
MAX_LOGIN_BODY = 4096  # bytes of a login form: a token and a little more
REVOKED_WITHIN = 1.0  # seconds: how soon an open stream ends after its token is revoked
# the origin Obsidian's requestUrl sends: its plugin (obsidian-plugin/) is let in with a token
OBSIDIAN = "app://obsidian.md"


class Visitor(AuthenticatedUser):
    """Who a request is: the token it showed, kind and all. The MCP SDK binds a session to the
    name (a session opened with one token is not the other's)."""

    def __init__(self, token: Token) -> None:
        super().__init__(AccessToken(token="", client_id=token.name, scopes=[token.kind]))
        self.token = token


class Sessions:
    """Browser sessions: a random id -> the token that opened it and when it was last used, in
    memory only (a restarted server asks the browser to log in again); one unused for
    SESSION_IDLE is over."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_id: collections.OrderedDict[str, tuple[Token, float]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._clock = clock

    def open(self, token: Token) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._by_id[session] = (token, self._clock())
            held = [
                kept for kept, (owner, _) in self._by_id.items() if owner.sha256 == token.sha256
            ]
            for oldest in held[:-MAX_SESSIONS]:
                del self._by_id[oldest]
        return session

    def get(self, session: str) -> Token | None:
        """The session's token, its idle time begun again; None for one unknown or over."""
        now = self._clock()
        with self._lock:
            token, used = self._by_id.pop(session, (None, now))
            if token is None or now - used > SESSION_IDLE:
                return None
            self._by_id[session] = (token, now)  # the most recently used is the last to go
            return token

    def end(self, session: str) -> None:
        with self._lock:
            self._by_id.pop(session, None)


def _machine(path: str) -> bool:
    return path.startswith(MACHINE_PATHS)


def _obsidian(origin: str, path: str, headers: Headers) -> bool:
    """Obsidian asking the API or MCP with a token (checked next, as anyone's): no page of
    another site, whose fetch cannot send that origin, and a browser's session is no token."""
    return origin == OBSIDIAN and _machine(path) and bool(headers.get("authorization"))


def refusal(
    path: str,
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    styled: bool = True,
) -> Response:
    """An error as the asker reads it: JSON for the API and MCP, a short page for a browser
    (`styled` under the page's folder, where its stylesheet is)."""
    if _machine(path):
        return JSONResponse({"error": message}, status, headers)
    return notice(status, HTTPStatus(status).phrase, message, headers, styled)


AGENT_HELP = (
    "Agents send a token as the header Authorization: Bearer TOKEN "
    "(memsync token add NAME makes one); a browser's session is not taken here."
)
ELSEWHERE = (
    "The search page is at the address memsync serve printed when it started on a terminal "
    "(http://HOST:PORT/ and a folder name of its own); it is refused at any other address."
)


class Guard:
    """ASGI middleware in front of every route: /api and /mcp take a Bearer token; the page's
    folder (`prefix`, "/Xk3...") takes a token or a session, opened at its login address; any
    other address is refused."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: Tokens,
        hosts: frozenset[str],
        cookie: str,
        tls: bool,
        prefix: str,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.hosts = hosts
        self.cookie = cookie
        self.tls = tls
        self.prefix = prefix
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
            refused, token = await self._admit(scope, receive)
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
                self._logged(scope.get("path", "")),
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
                # just checked on the way in: the next look is a second from now
                while True:
                    await anyio.sleep(REVOKED_WITHIN)
                    if not self._still(token):
                        break
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

    def _on_page(self, path: str) -> bool:
        return path == self.prefix or path.startswith(self.prefix + "/")

    def _logged(self, path: str) -> str:
        """A path for the log: the page's folder named so, not spelled (a log may be shared);
        nor any address refused as elsewhere, which may be the folder's name mistyped or cut
        short (most of it, then)."""
        if self._on_page(path):
            return "/PAGE" + path[len(self.prefix) :]
        return path if _machine(path) else "/ELSEWHERE"

    def _refusal(
        self, path: str, status: int, message: str, headers: dict[str, str] | None = None
    ) -> Response:
        return refusal(path, status, message, headers, styled=self._on_page(path))

    async def _admit(self, scope: Scope, receive: Receive) -> tuple[Response | None, Token | None]:
        """(a refusal or the login's answer, None), (None, the token the request carries), or
        (None, None) for a public asset."""
        headers = Headers(scope=scope)
        path = scope.get("path", "")
        host = headers.get("host", "")
        if host_name(host) not in self.hosts:
            return self._refusal(
                path, 403, f"this server does not answer to the host {host!r}"
            ), None
        origin = headers.get("origin")
        if (
            origin is not None
            and not same_origin(origin, host)
            and not _obsidian(origin, path, headers)
        ):
            return self._refusal(path, 403, "requests from other sites' pages are refused"), None
        if not (_machine(path) or self._on_page(path)):
            return refusal(path, 404, ELSEWHERE, styled=False), None
        if path == self.prefix:  # its relative links need the slash (the asker knows the name)
            return RedirectResponse(self.prefix + "/", 308), None
        within = path[len(self.prefix) :]
        try:
            if _machine(path):
                return self._bearer(headers, path)
            if within.startswith(ASSETS) and scope.get("method") in ("GET", "HEAD"):
                return None, None
            if within == LOGIN:
                return await self._login(scope, receive), None
            if headers.get("authorization"):
                return self._bearer(headers, path)
            return self._session(headers, path)
        except MemsyncError as exc:  # the token file cannot be read
            log.error("cannot check a token: %s", exc)
            return self._refusal(
                path, 503, "this server cannot check tokens now; see its log"
            ), None

    def _bearer(self, headers: Headers, path: str) -> tuple[Response | None, Token | None]:
        scheme, _, secret = headers.get("authorization", "").partition(" ")
        if not scheme:
            return self._unknown(path, "a token is needed"), None
        token = self.tokens.verify(secret.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            return self._unknown(path, "the token is not valid (revoked, or mistyped)"), None
        return None, self._used(token)

    def _session(self, headers: Headers, path: str) -> tuple[Response | None, Token | None]:
        sessions = cookie_values(headers.get("cookie", ""), self.cookie)
        if not sessions:
            return self._unknown(path, "log in to see the notes"), None
        for session in sessions:
            token = self.sessions.get(session)
            if token is not None and self.tokens.still(token):
                return None, self._used(token)
            self.sessions.end(session)
        why = "your session ended (its token was revoked, or it went unused too long)"
        return self._unknown(path, why, clear=True), None

    def _used(self, token: Token) -> Token:
        self.tokens.touch(token)
        return token

    def _unknown(self, path: str, why: str, clear: bool = False) -> Response:
        """A 401: for an agent, how to send a token; in the page's folder, the login form."""
        challenge = {"WWW-Authenticate": "Bearer"}
        if _machine(path):
            return refusal(path, 401, f"{why}. {AGENT_HELP}", challenge)
        # the folder's login, from an address of any depth in it (`/PAGE/a/b` posts to ../login)
        depth = path[len(self.prefix) :].count("/") - 1
        response = login_form(401, f"{why}.", challenge, "../" * depth + "login")
        if clear:
            response.delete_cookie(self.cookie, path=self.prefix + "/")
        return response

    async def _login(self, scope: Scope, receive: Receive) -> Response:
        """The login address: a token in the query (the address serve prints, GET) or in a
        form's body (POST, never its query) becomes a session cookie bound to the page's folder,
        and a redirect to the page, on this server, without the token."""
        method = scope.get("method")
        if method == "POST":
            form, too_large = await _form(scope, receive)
            if too_large:
                return login_form(413, "That form is too large for a token.")
            secret, kept = form.get("token", ""), []
        elif method in ("GET", "HEAD"):
            query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"))
            asked = dict(query)
            if "token" not in asked:
                return login_form(200, "")
            secret = asked["token"]
            kept = [(name, value) for name, value in query if name != "token"]
        else:
            return self._refusal(scope.get("path", ""), 405, "log in with GET or POST")
        if not secret:
            return self._unknown(scope.get("path", ""), "a token is needed")
        token = self.tokens.verify(secret.strip())
        if token is None:
            return self._unknown(
                scope.get("path", ""), "the token is not valid (revoked, or mistyped)"
            )
        # the page's own address, whatever the request said: never another site's
        target = self.prefix + "/" + (f"?{urllib.parse.urlencode(kept)}" if kept else "")
        response = RedirectResponse(target, 303)
        response.set_cookie(
            self.cookie,
            self.sessions.open(self._used(token)),
            httponly=True,
            samesite="strict",
            secure=self.tls,
            path=self.prefix + "/",
        )
        return response


def cookie_values(header: str, name: str) -> list[str]:
    """Every value a Cookie header gives `name`, in its order. Any other server of this host
    may set a cookie of that name for "/" (cookies ignore ports), which the browser sends beside
    this one's: taking only one of them would let it log the user out, for good."""
    return [
        value
        for pair in header.split(";")
        for key, value in cookie_parser(pair).items()
        if key == name and value
    ]


async def _form(scope: Scope, receive: Receive) -> tuple[dict[str, str], bool]:
    """A urlencoded form's fields (the last of each name), and whether it was too large to read;
    any other body has no fields."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > MAX_LOGIN_BODY:
            return {}, True
        if not message.get("more_body"):
            break
    kind = Headers(scope=scope).get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}, False
    return dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"))), False
