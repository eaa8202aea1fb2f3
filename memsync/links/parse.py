"""A note's links, pure: wikilinks, embeds and Markdown links to notes, each with its line, what
it names and the heading or block it points at; never inside code, escaped, or a URL."""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import unquote

# A note's text is parsed in time linear in its size, whatever its shape: no regex here may
# try a match at each of many starts that all read on to one far end (a line of backticks, `[`
# then many `\\[`: 2 s for 16 KB, holding the interpreter lock). Fenced blocks, code spans and
# a Markdown link's text are found by scanners; each regex left reads a bounded stretch.
# a fence may stand in a block quote or a callout (`> ```md`)
_FENCE_OPEN = re.compile(r"[ \t>]*(`{3,}|~{3,})")
_BACKTICKS = re.compile(r"`+")
# what stands before a link's bracket (an embed's `!`, an escaping backslash) is read by _before
_WIKILINK = re.compile(r"\[\[([^\[\]\n]+)\]\]")
# what follows a Markdown link's `](`: a target without spaces unless in angle brackets, an
# optional "title", then `)`
_TARGET = re.compile(r"(?:<([^<>\n]+)>|([^\s()<>]+))(?:\s+\"[^\"\n]*\")?\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# a Markdown link to a file that is not a note: a path ending in another extension
_OTHER_FILE = re.compile(r"\.(?!md$|markdown$)[A-Za-z0-9]{1,8}$", re.I)
# a wikilink to an attachment (the formats Obsidian opens, and common documents): a dotted
# name such as [[Node.js]] stays a note's name
_ATTACHMENT = re.compile(
    r"\.(avif|bmp|gif|jpe?g|png|svg|webp|flac|m4a|mp3|ogg|wav|webm|3gp|mkv|mov|mp4|ogv|pdf"
    r"|canvas|base|docx?|xlsx?|pptx?|odt|csv|json|txt|html?|zip)$",
    re.I,
)
MAX_LINKS = 10_000  # a note's, kept: a generated note of a million links costs nothing more


class Link(NamedTuple):  # a tuple: a first index makes one per link of every note
    """One link as a note writes it. `target` is what it names without its anchor ("" for the
    same note), `anchor` the heading path (`Conflicts#Sub`) or block (`^id`) it points at."""

    line: int  # 1-based
    written: str  # as in the text: `[[Heron#Conflicts|the conflicts]]`
    target: str
    anchor: str | None
    kind: str  # "link" or "embed"
    style: str  # "wiki" (a name or a path from the root) or "markdown" (relative, then root)


def links_in(source: str, text: str) -> list[Link]:
    """Every link to a note in the text of the note at `source`, in order of appearance; a
    Markdown link that climbs out of the vault is none. A link inside a code span is none, but
    a code span inside a link (`[[Filters#`date`|date]]`) leaves it a link, as in Obsidian."""
    wiki, markdown = "[[" in text, "](" in text
    if not wiki and not markdown:  # most notes of most vaults: no regex runs
        return []
    visible = _without_fences(text) if "```" in text or "~~~" in text else text
    spans = _code_spans(visible) if "`" in text else []
    starts = [start for start, _ in spans]
    lines = _LineNumbers(text)

    def in_code(offset: int) -> bool:
        at = bisect.bisect_right(starts, offset) - 1
        return at >= 0 and spans[at][0] <= offset < spans[at][1]

    found: list[tuple[int, Link]] = []
    for match in _WIKILINK.finditer(visible) if wiki else ():
        embed, escaped = _before(visible, match.start())
        if not escaped and not (spans and in_code(match.start())):
            link = _wikilink(match, text, lines, embed)
            if link is not None:
                found.append((match.start(), link))
                if len(found) == MAX_LINKS:  # the first kept are among each kind's first
                    break
    wikilinks = len(found)
    for start, end, raw in _markdown_links(visible) if markdown else ():
        embed, escaped = _before(visible, start)
        if escaped or visible[start - 1 : start] == "]":
            continue  # `]` before: the brackets of a wikilink's, not a Markdown link's
        if spans and in_code(start):
            continue
        link = _markdown(start, end, raw, text, lines, embed)
        if link is not None and (link.style != "markdown" or inside_vault(source, link.target)):
            found.append((start, link))
            if len(found) - wikilinks == MAX_LINKS:
                break
    found.sort(key=lambda item: item[0])
    return [link for _, link in found[:MAX_LINKS]]


def _without_fences(text: str) -> str:
    """The text with each fenced block blanked (spaces, its newlines kept): from a line opening
    a fence to the line holding the same run of backticks or tildes alone, or to the end."""
    lines = text.split("\n")
    fence: str | None = None
    for number, line in enumerate(lines):
        if fence is None:
            opened = _FENCE_OPEN.match(line)
            if opened is None or number == len(lines) - 1:  # an opening line ends with \n
                continue
            fence = opened.group(1)
        elif line.lstrip(" \t>").rstrip(" \t\r") == fence:  # a \r\n note's line keeps its \r
            fence = None
        lines[number] = " " * len(line)
    return "\n".join(lines)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """The code spans of the text, (start, end) in order: a run of backticks, to the next run of
    as many on its line; a run without one opens a span one backtick shorter, from its second
    backtick on (as the regex ``(`+)(?!`)[^\\n]*?(?<!`)\\1(?!`)`` finds them, in linear time)."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    spans: list[tuple[int, int]] = []
    first = 0
    while first < len(runs):
        line_end = text.find("\n", runs[first][0])
        last = first
        while last < len(runs) and (line_end < 0 or runs[last][0] < line_end):
            last += 1
        spans += _spans_on_line(runs[first:last])
        first = last
    return spans


def _spans_on_line(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans the backtick runs of one line make: each run, or its longest tail that the
    next run of its length closes. Only lengths the line has are tried, at most a run's own
    length of them: linear in the backticks."""
    of_length: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        of_length.setdefault(end - start, []).append(index)
    if len(of_length) == 1:  # most lines: runs of one length close each other in turn
        return [(runs[i][0], runs[i + 1][1]) for i in range(0, len(runs) - 1, 2)]
    lengths = sorted(of_length)
    spans: list[tuple[int, int]] = []
    done = 0  # the end of the last span: runs before it are inside it
    for index, (start, end) in enumerate(runs):
        if start < done:
            continue
        for shorter in range(bisect.bisect_right(lengths, end - start) - 1, -1, -1):
            same = of_length[lengths[shorter]]
            after = bisect.bisect_right(same, index)
            if after < len(same):
                done = runs[same[after]][1]
                spans.append((end - lengths[shorter], done))
                break
    return spans


def _markdown_links(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, target as written) of each `[text](target)`, as a regex would find them: the
    text holds no line break and no bracket unless escaped; of the `](` that may end it, the
    first followed by a target. Each `](` is read once, and the text between the last link and
    the next `](` at most twice: back to the last line break or bracket that link text cannot
    cross, then on from it to the first `[`."""
    done = 0  # where the last link ended, or where no `[` is left before the next `](`
    for closer in re.finditer(r"\]\(", text):
        at = closer.start()
        if at < done:
            continue
        target = _TARGET.match(text, closer.end())
        if target is None:
            continue
        start = text.find("[", _last_end(text, done, at), at)
        if start < 0:
            done = at
            continue
        done = target.end()
        yield start, done, target.group(1) if target.group(1) is not None else target.group(2)


def _last_end(text: str, lo: int, hi: int) -> int:
    """The last offset in [lo, hi) that link text cannot run through (a line break, a bracket
    not escaped), else lo; each of the three searches moves only backwards."""
    line_end = text.rfind("\n", lo, hi)
    lo = max(lo, line_end)
    found = {bracket: text.rfind(bracket, lo, hi) for bracket in "[]"}
    while True:
        bracket, at = max(found.items(), key=lambda item: item[1])
        if at < 0 or text[at - 1 : at] != "\\":
            return max(lo, at)
        found[bracket] = text.rfind(bracket, lo, at)


class _LineNumbers:
    """The line of an offset, counted on from the offset asked before (each kind of link is
    found in order, so the text is counted about once). Lines end as editors, `get` and the
    chunker end them: at \n, \r\n or a lone \r (an offset asked, a link's, is never inside
    a \r\n)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset, self.line = 0, 1
        self.returns = "\r" in text

    def __call__(self, offset: int) -> int:
        if offset < self.offset:
            self.offset, self.line = 0, 1
        text, start = self.text, self.offset
        self.line += text.count("\n", start, offset)
        if self.returns:
            self.line += text.count("\r", start, offset) - text.count("\r\n", start, offset)
        self.offset = offset
        return self.line


def _before(text: str, start: int) -> tuple[bool, bool]:
    """(an embed: `!` before the bracket, escaped: a backslash before the bracket or the `!`)."""
    embed = text[start - 1 : start] == "!"
    at = start - 1 if embed else start
    return embed, text[at - 1 : at] == "\\"


def _wikilink(match: re.Match[str], text: str, line: _LineNumbers, embed: bool) -> Link | None:
    inner = match.group(1).replace("\\|", "|")  # a pipe escaped inside a table
    target, anchor = split_anchor(inner.split("|", 1)[0].strip())
    if target is None or "." in target and _ATTACHMENT.search(target):
        return None
    return _found(match.start(), match.end(), text, line, embed, target, anchor, "wiki")


def _markdown(
    start: int, end: int, raw: str, text: str, line: _LineNumbers, embed: bool
) -> Link | None:
    if ":" in raw and _SCHEME.match(raw) or raw.startswith("//"):
        return None  # a URL, mailto:, obsidian://
    path, _, fragment = raw.partition("#")
    target = unquote(path).strip()
    if (
        "." in target
        and _OTHER_FILE.search(target)
        or target.startswith("/")
        and not target.strip("/")
    ):
        return None
    anchor = unquote(fragment).strip() or None
    style = "markdown" if target else "wiki"
    return _found(start, end, text, line, embed, target, anchor, style)


def _found(
    start: int,
    end: int,
    text: str,
    line: _LineNumbers,
    embed: bool,
    target: str,
    anchor: str | None,
    style: str,
) -> Link:
    """The link found at `start:end`, as written (an embed's `!` with it)."""
    written = text[start - embed : end]
    return Link(line(start), written, target, anchor, "embed" if embed else "link", style)


def split_anchor(written: str) -> tuple[str | None, str | None]:
    """`Note#Heading#Sub` -> ("Note", "Heading#Sub"); `#^id` -> ("", "^id"); None for an empty
    link (`[[]]`, `[[#]]`)."""
    target, _, anchor = written.partition("#")
    target, anchor = target.strip(), anchor.strip().strip("#").strip()
    if not target and not anchor:
        return None, None
    return target, anchor or None


def wikilink_location(text: str) -> tuple[str, str | None] | None:
    """What `get '[[Note#Heading]]'` asks for: (the note's name or path, its anchor), or None
    when the text is not one wikilink (a plain path)."""
    match = re.fullmatch(r"\s*!?\[\[([^\[\]\n]+)\]\]\s*", text)
    if not match:
        return None
    target, anchor = split_anchor(match.group(1).split("|", 1)[0])
    return None if target is None else (target, anchor)


def inside_vault(source: str, target: str) -> str | None:
    """A Markdown link's path, normalised: from the vault's root where it starts with `/`, else
    relative to its note's folder; None when it climbs out of the vault."""
    folder = "" if target.startswith("/") else posixpath.dirname(source)
    joined = posixpath.normpath(posixpath.join(folder, target.lstrip("/")))
    return None if joined == ".." or joined.startswith("../") else joined
