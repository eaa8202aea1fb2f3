"""A note's links, pure: wikilinks, embeds and Markdown links to notes, each with its line, what
it names and the heading or block it points at; never inside code, escaped, or a URL."""

from __future__ import annotations

import bisect
import posixpath
import re
from typing import NamedTuple
from urllib.parse import unquote

# fenced blocks and code spans, blanked before links are looked for (offsets and lines kept)
# a fence may stand in a block quote or a callout (`> ```md`)
_FENCE = re.compile(r"^[ \t>]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t>]*\1[ \t]*$|\Z)", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`)[^\n]*?(?<!`)\1(?!`)")
# each starts with its literal bracket, which the regex engine looks for first; what stands
# before it (an embed's `!`, an escaping backslash) is read by _before
_WIKILINK = re.compile(r"\[\[([^\[\]\n]+)\]\]")
# [text](target) or [text](<target>): text without brackets inside, a target without spaces
# unless in angle brackets; an optional "title" after the target
_MARKDOWN = re.compile(
    r"\[(?:[^\[\]\n]|\\[\[\]])*\]\((?:<([^<>\n]+)>|([^\s()<>]+))(?:\s+\"[^\"\n]*\")?\)"
)
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
    visible = _blank(_FENCE, text) if "```" in text or "~~~" in text else text
    spans = [(m.start(), m.end()) for m in _CODE_SPAN.finditer(visible)] if "`" in text else []
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
    for match in _MARKDOWN.finditer(visible) if markdown else ():
        embed, escaped = _before(visible, match.start())
        if escaped or visible[match.start() - 1 : match.start()] == "]":
            continue  # `]` before: the brackets of a wikilink's, not a Markdown link's
        if spans and in_code(match.start()):
            continue
        link = _markdown(match, text, lines, embed)
        if link is not None and (link.style != "markdown" or inside_vault(source, link.target)):
            found.append((match.start(), link))
    found.sort(key=lambda item: item[0])
    return [link for _, link in found[:MAX_LINKS]]


class _LineNumbers:
    """The line of an offset, counted on from the offset asked before (each kind of link is
    found in order, so the text is counted about once)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset, self.line = 0, 1

    def __call__(self, offset: int) -> int:
        if offset < self.offset:
            self.offset, self.line = 0, 1
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def _blank(pattern: re.Pattern[str], text: str) -> str:
    """The text with every match replaced by spaces, its newlines kept."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


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
    return _found(match, text, line, embed, target, anchor, "wiki")


def _markdown(match: re.Match[str], text: str, line: _LineNumbers, embed: bool) -> Link | None:
    raw = match.group(1) if match.group(1) is not None else match.group(2)
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
    return _found(match, text, line, embed, target, anchor, "markdown" if target else "wiki")


def _found(
    match: re.Match[str],
    text: str,
    line: _LineNumbers,
    embed: bool,
    target: str,
    anchor: str | None,
    style: str,
) -> Link:
    """The link `match` found, as written (an embed's `!` with it)."""
    written = text[match.start() - embed : match.end()]
    return Link(line(match.start()), written, target, anchor, "embed" if embed else "link", style)


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
