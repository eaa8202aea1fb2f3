"""The JSON shapes of memsync's answers, as `--json` and the MCP tools give them (the tools'
output schemas): output fills them, the faces hand them on."""

from __future__ import annotations

try:  # pydantic (the MCP SDK's) reads TypedDicts from typing_extensions before Python 3.12
    from typing_extensions import TypedDict
except ImportError:  # pragma: no cover - an install without the MCP extra
    from typing import TypedDict


# a pipeline.Answer and its Hits as the MCP tool gives them; the class names are the titles in
# the tool's schema (no docstring: pydantic would add it to the schema as a description)
class SearchHit(TypedDict):
    path: str
    start_line: int
    end_line: int
    score: float
    vector_score: float | None
    text_score: float | None
    hybrid_match: bool
    snippet: str
    snippet_start_line: int  # the snippet's first line: it is lines of the note, in a row
    citation: str


class SearchResult(TypedDict):
    query: str
    mode: str
    notices: list[str]
    terms: list[str]  # the query's words to mark in the snippets, longest first
    results: list[SearchHit]


class RelatedResult(TypedDict):
    note: str  # the note asked about, as its path
    mode: str
    notices: list[str]
    results: list[SearchHit]


class NoteLines(TypedDict):
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str
    truncated: bool
    copy: str | None
    citation: str
    note: str | None


class TreeNote(TypedDict):
    path: str
    size: int
    modified: str
    chunks: int


class TreeFolder(TypedDict):
    path: str
    notes: int


class Tree(TypedDict):
    path: str
    notes: list[TreeNote]
    folders: list[TreeFolder]
    more: str  # what was left out of a long listing, and how to see it ("" when nothing was)


class LinkEntry(TypedDict):
    path: str  # the linking note
    line: int
    link: str  # as written
    kind: str  # link or embed
    target: str
    anchor: str | None  # the heading path or ^block it points at
    resolved: str | None  # the note it opens; None when none
    citation: str


class BacklinkEntry(LinkEntry):
    text: str  # the linking line


class Links(TypedDict):
    path: str
    links: list[LinkEntry]
    backlinks: list[BacklinkEntry]
    more: str  # what was left out beyond 500 of a kind ("" when nothing was)


class Written(TypedDict):
    path: str
    start_line: int
    end_line: int
    citation: str
    indexed: bool
