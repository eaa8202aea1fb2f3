"""The lines a link's anchor points at, pure: a heading's section (its line to the line before
the next heading of the same or higher level) or a block (`^id`: the paragraph or list item
that ends with it, or the block just above a line holding the id alone)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..metadata import front_matter_lines, heading
from ..text import split_lines
from .resolve import key

_FENCE = re.compile(r"^[ \t>]*(`{3,}|~{3,})")  # in a block quote or a callout too
_NOT_IN_LINKS = re.compile(r"[#|^:\[\]%]")
LISTED = 2_000  # characters of headings a missing heading's message lists, at most
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]")


@dataclass(frozen=True)
class Heading:
    line: int  # 1-based
    level: int
    title: str


def headings(text: str) -> list[Heading]:
    """The note's headings in order, outside front matter and fenced code."""
    lines = split_lines(text)
    found: list[Heading] = []
    fence: str | None = None
    for number in range(front_matter_lines(text) + 1, len(lines) + 1):
        line = lines[number - 1]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        level_title = heading(line, titled=False)
        if level_title:
            found.append(Heading(number, level_title[0], level_title[1].strip()))
    return found


def _same_heading(written: str, title: str) -> bool:
    return _plain_heading(written) == _plain_heading(title)


def _plain_heading(text: str) -> str:
    """A heading as a link names it: Obsidian leaves out what a link cannot hold (`#|^:[]` and
    `%`), compared case-folded and NFC."""
    return " ".join(_NOT_IN_LINKS.sub(" ", key(text)).split())


def section(text: str, anchor: str) -> tuple[int, int] | None:
    """The lines (first, last) of the section or block `anchor` names, None if the note has
    none such. `A#B` is heading B inside A's section."""
    total = max(1, len(split_lines(text)))
    if anchor.startswith("^"):
        return block(text, anchor[1:])
    found = headings(text)
    start, end, level = 1, total, 0
    for part in [p for p in anchor.split("#") if p.strip()]:
        inside = [h for h in found if start <= h.line <= end and h.level > level]
        match = next((h for h in inside if _same_heading(part, h.title)), None)
        if match is None:
            return None
        after = [h for h in found if h.line > match.line and h.level <= match.level]
        start, level = match.line, match.level
        end = min(end, after[0].line - 1 if after else total)
    return start, end


def missing(path: str, anchor: str, text: str) -> str:
    """One line: the note lacks that heading or block, and which headings it has (as many as
    LISTED characters hold, then how many more)."""
    if anchor == "^":
        return f"{path}#^ names no block: give the block's id after ^ ([[Note#^id]])"
    if anchor.startswith("^"):
        return f"{path} has no block {anchor}"
    titles = [h.title for h in headings(text)]
    if not titles:
        return f"{path} has no heading {anchor!r}; it has no headings"
    listed, size = [], 0
    for title in titles:
        size += len(title) + 2
        if size > LISTED:
            break
        listed.append(title)
    more = len(titles) - len(listed)
    rest = f", and {more:,} more" if more else ""
    return f"{path} has no heading {anchor!r}; its headings: {', '.join(listed)}{rest}"


def block(text: str, block_id: str) -> tuple[int, int] | None:
    """The lines of the block `^block_id` ends; None for an empty id, which names no block (a
    line ending in a lone `^` is not one)."""
    if not block_id:
        return None
    lines = split_lines(text)
    marker = re.compile(rf"(?:^|\s)\^{re.escape(block_id)}\s*$")
    for index, line in enumerate(lines):
        if not marker.search(line):
            continue
        if line.strip() == f"^{block_id}":  # the id alone: the block above it
            first = index
            while first > 0 and lines[first - 1].strip():
                first -= 1
            return (first + 1, index + 1) if first < index else (index + 1, index + 1)
        if _LIST_ITEM.match(line):
            return index + 1, index + 1
        first = index
        while (
            first > 0 and lines[first - 1].strip() and not heading(lines[first - 1], titled=False)
        ):
            first -= 1
        return first + 1, index + 1
    return None
