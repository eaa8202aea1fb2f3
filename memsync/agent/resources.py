"""The notes as MCP resources, pure: each indexed note is `memsync://note/<its path>`, listed a
page at a time behind an opaque cursor, and linked from search results."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from urllib.parse import quote

from mcp.types import Annotations, ListResourcesResult, Resource, ResourceLink

from ..errors import ArgumentError

if TYPE_CHECKING:
    from ..store.protocols import NoteRow

NOTE_URI = "memsync://note/"
# `+`: a path's slashes stay as they are (a plain {path} would hold no slash), as listed
NOTE_TEMPLATE = NOTE_URI + "{+path}"
MARKDOWN = "text/markdown"
# notes one resources/list answer holds: about 300 bytes each, so a page is ~150 KB of JSON
PAGE_SIZE = 500


def note_uri(path: str) -> str:
    """Pure: a note's URI, its path percent-encoded but for the slashes between folders (a `#`,
    `?` or space in a name would end or break the URI)."""
    return NOTE_URI + quote(path, safe="/")


def cursor_after(path: str) -> str:
    """Pure: the cursor of the page that starts after `path`, opaque to the client."""
    return base64.urlsafe_b64encode(path.encode()).decode()


def after_cursor(cursor: str | None) -> str:
    """Pure: the path a cursor continues after ("" for none); ArgumentError for one this server
    could not have given."""
    if not cursor:
        return ""
    try:
        return base64.urlsafe_b64decode(cursor.encode("ascii")).decode()
    except (ValueError, binascii.Error, UnicodeError):
        raise ArgumentError(
            "the cursor is not one this server gave: list the resources again from the start"
        ) from None


def note_resource(note: NoteRow) -> Resource:
    """Pure: an indexed note as a resource: its title as indexed (its file name without one),
    its size, and when it was last changed."""
    return Resource(
        uri=note_uri(note.path),
        name=note.path,
        title=note.title or note.path.rsplit("/", 1)[-1].removesuffix(".md"),
        mime_type=MARKDOWN,
        size=note.size,
        annotations=Annotations(last_modified=_iso(note.mtime_ns)),
    )


def notes_page(notes: list[NoteRow], size: int) -> ListResourcesResult:
    """Pure: one page of resources from up to `size` + 1 notes (the one past the page only says
    that another page follows)."""
    listed = notes[:size]
    more = len(notes) > size
    return ListResourcesResult(
        resources=[note_resource(note) for note in listed],
        next_cursor=cursor_after(listed[-1].path) if more else None,
    )


def note_links(paths: Iterable[str]) -> list[ResourceLink]:
    """Pure: a resource link to each note, once each, in the order first named."""
    return [
        ResourceLink(type="resource_link", uri=note_uri(path), name=path, mime_type=MARKDOWN)
        for path in dict.fromkeys(paths)
    ]


def _iso(mtime_ns: int) -> str:
    when = datetime.fromtimestamp(mtime_ns / 1e9, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
