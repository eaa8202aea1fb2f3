"""The MCP tools' structured results: their shapes (the tools' output schemas), and the tree
listing cut to what an agent's context holds."""

from __future__ import annotations

from datetime import datetime

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


# notes and folded folders one answer lists: the whole tree of a vault of 6,280 notes was 1.2 MB
# (about 300k tokens), more than an agent's context holds
MOST_TREE_ENTRIES = 500


def tree_of(listing: list[tuple[str, int, int, int]], folder: str, depth: int | None) -> Tree:
    """Pure: the indexed notes below `folder`, those deeper than `depth` folded into folders.
    Without a depth, as deep as MOST_TREE_ENTRIES allows; at most that many entries, in path
    order, and `more` says what was left out."""
    prefix = f"{folder}/" if folder else ""
    levels = [path[len(prefix) :].split("/") for path, *_ in listing]
    deepest = max((len(rest) for rest in levels), default=1)
    chosen = depth
    if depth is None and len(listing) > MOST_TREE_ENTRIES and deepest > 1:
        fitting = [d for d in range(1, deepest) if _entries(levels, d) <= MOST_TREE_ENTRIES]
        chosen = max(fitting, default=1)
    listed: list[TreeNote] = []
    folded: dict[str, int] = {}
    for (path, size, mtime_ns, chunks), rest in zip(listing, levels):
        if chosen is not None and len(rest) > chosen:
            where = prefix + "/".join(rest[:chosen])
            folded[where] = folded.get(where, 0) + 1
            continue
        modified = datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")
        listed.append({"path": path, "size": size, "modified": modified, "chunks": chunks})
    folders: list[TreeFolder] = [{"path": p, "notes": n} for p, n in sorted(folded.items())]
    more = []
    if chosen != depth:
        more.append(
            f"{len(listing):,} notes in all, listed to depth {chosen}: ask with a folder (path)"
            " or a depth to see further"
        )
    entries = len(listed) + len(folders)
    if entries > MOST_TREE_ENTRIES:
        everything = [n["path"] for n in listed] + [f["path"] for f in folders]
        kept = set(sorted(everything, key=lambda path: path.split("/"))[:MOST_TREE_ENTRIES])
        listed = [n for n in listed if n["path"] in kept]
        folders = [f for f in folders if f["path"] in kept]
        more.append(
            f"the first {MOST_TREE_ENTRIES:,} of {entries:,} entries, in path order: ask for a "
            "folder (path) for the rest"
        )
    return {"path": folder, "notes": listed, "folders": folders, "more": "; ".join(more)}


def _entries(levels: list[list[str]], depth: int) -> int:
    """How many entries a listing `depth` folders deep holds: notes and folded folders."""
    notes = sum(1 for rest in levels if len(rest) <= depth)
    return notes + len({tuple(rest[:depth]) for rest in levels if len(rest) > depth})
