"""The search page's routes for `memsync serve`, given the face's three calls, all under the
page's folder (web.app mounts them there): `/` the form and its results, `/note` one note's
lines, `/assets/NAME` the stylesheet and icon; and the short pages (the login form, a 404) the
server's auth answers a browser with. Every link is relative, so none needs the folder's name;
every HTML answer carries a strict Content-Security-Policy.

The calls (synchronous: they run in Starlette's thread pool), each raising MemsyncError:
    search(text, *, paths, since, until, tags, mode) -> the object `memsync query --json` prints
    get(request) -> a note's lines as memory_get's data (NoteLines), the whole note, the
        first and last line the request asked for (a path's lines, a link's section), to mark,
        or None for both, and what the view lists beside them (Nearby: its related notes, its
        links and backlinks)
    status() -> a few facts of `memsync status --json` (Memory.glance): notes, chunks, the
        writer, the last sync, read without walking the vault
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from typing import Any, TypedDict

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import ArgumentError, ConfigError, IndexNotFound, MemsyncError
from ..memory import NoteRequest, note_request
from ..shapes import Links, RelatedResult
from . import page

Search = Callable[..., dict[str, Any]]


class Nearby(TypedDict, total=False):
    """What a note's view lists beside its lines, each part or why it could not be had."""

    related: RelatedResult
    related_error: str
    links: Links
    links_error: str


Get = Callable[[NoteRequest], tuple[dict[str, Any], int | None, int | None, Nearby]]
Status = Callable[[], dict[str, Any]]

# no script, no frame, no foreign origin: a note's text that slipped past escaping could not run
POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'none'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HTML_HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",  # notes' text stays out of shared and disk caches
}
# an asset's link carries its digest (page.asset_href): a changed file is a new address
ASSET_HEADERS = {
    "Cache-Control": "public, max-age=31536000, immutable",
    "X-Content-Type-Options": "nosniff",
}


def html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status, headers={**HTML_HEADERS, **(headers or {})})


def notice(
    status: int,
    title: str,
    message: str,
    headers: dict[str, str] | None = None,
    styled: bool = True,
) -> Response:
    """A short page for a browser: a 404, a 403; `styled` where the stylesheet's relative
    address reaches it (under the page's folder)."""
    return html(page.notice_page(title, message, styled), status, headers)


def login_form(
    status: int, message: str, headers: dict[str, str] | None = None, action: str = "login"
) -> Response:
    """The login page: why (if anything went wrong), and a form that posts a token. Its referrer
    policy lets the browser name this page's origin in the POST's Origin header (under
    no-referrer it sends "null", which the Guard refuses as another site's)."""
    own_origin = {"Referrer-Policy": "same-origin", **(headers or {})}
    return html(page.login_page(message, action), status, own_origin)


def status_of(exc: MemsyncError) -> int:
    """The HTTP status of memsync's error: a value refused is the asker's (400), no index 404,
    anything else the server's for now (503)."""
    if isinstance(exc, (ArgumentError, ConfigError)):
        return 400
    return 404 if isinstance(exc, IndexNotFound) else 503


def routes(search: Search, get: Get, status: Status) -> list[BaseRoute]:
    """The page's routes over the face's calls, to mount behind the server's auth."""

    async def status_html() -> str:
        try:
            return page.status_line(await run_in_threadpool(status))
        except MemsyncError as exc:
            return page.status_line(None, str(exc))

    async def search_page(request: Request) -> Response:
        form = page.form_of(request.query_params.multi_items())
        result, error, code = None, "", 200
        if form.q.strip():
            try:
                filters = form.search_args()
                result = await run_in_threadpool(lambda: search(form.q, **filters))
            except MemsyncError as exc:
                error, code = str(exc), status_of(exc)
        terms = result["terms"] if result else []
        return html(page.search_page(form, await status_html(), result, terms, error), code)

    async def note_page(request: Request) -> Response:
        location = request.query_params.get("location", "")
        try:
            lines, first, last, nearby = await run_in_threadpool(get, note_request(location))
        except MemsyncError as exc:
            return html(page.note_page(location, None, None, None, str(exc)), status_of(exc))
        return html(page.note_page(location, lines, first, last, nearby=nearby))

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in page.ASSETS:
            return Response("no such asset", 404, media_type="text/plain")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return Response(page.ASSETS[name], media_type=kind, headers=ASSET_HEADERS)

    return [
        Route("/", search_page, name="page"),
        Route("/note", note_page, name="note"),
        Route("/assets/{name}", asset, name="asset"),
    ]
