"""A note's links, pure: wikilinks, embeds and Markdown links to notes, each with its line, what
it names and the heading or block it points at; never inside code, escaped, or a URL."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

# fenced blocks and code spans, blanked before links are looked for (offsets and lines kept)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`)[^\n]*?(?<!`)\1(?!`)")
_WIKILINK = re.compile(r"(?<!\\)(!?)\[\[([^\[\]\n]+?)\]\]")
# [text](target) or [text](<target>): text without brackets inside, a target without spaces
# unless in angle brackets; an optional "title" after the target
_MARKDOWN = re.compile(
    r"(?<![\\!\]])(!?)\[(?:[^\[\]\n]|\\[\[\]])*\]\((?:<([^<>\n]+)>|([^\s()<>]+))(?:\s+\"[^\"\n]*\")?\)"
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


@dataclass(frozen=True)
class Link:
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
    Markdown link that climbs out of the vault is none."""
    visible = _blank(_CODE_SPAN, _blank(_FENCE, text))
    found: list[tuple[int, Link]] = []
    for match in _WIKILINK.finditer(visible):
        link = _wikilink(match, text)
        if link is not None:
            found.append((match.start(), link))
    for match in _MARKDOWN.finditer(visible):
        link = _markdown(match, text)
        if link is not None and (link.style != "markdown" or inside_vault(source, link.target)):
            found.append((match.start(), link))
    found.sort(key=lambda item: item[0])
    return [link for _, link in found[:MAX_LINKS]]


def _blank(pattern: re.Pattern[str], text: str) -> str:
    """The text with every match replaced by spaces, its newlines kept."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _wikilink(match: re.Match[str], text: str) -> Link | None:
    inner = match.group(2).replace("\\|", "|")  # a pipe escaped inside a table
    target, anchor = split_anchor(inner.split("|", 1)[0].strip())
    if target is None or _ATTACHMENT.search(target):
        return None
    return Link(
        _line(text, match.start()),
        text[match.start() : match.end()],
        target,
        anchor,
        "embed" if match.group(1) else "link",
        "wiki",
    )


def _markdown(match: re.Match[str], text: str) -> Link | None:
    raw = match.group(2) if match.group(2) is not None else match.group(3)
    if _SCHEME.match(raw) or raw.startswith("//"):
        return None  # a URL, mailto:, obsidian://
    path, _, fragment = raw.partition("#")
    target = unquote(path).strip()
    if _OTHER_FILE.search(target) or target.startswith("/") and not target.strip("/"):
        return None
    anchor = unquote(fragment).strip() or None
    return Link(
        _line(text, match.start()),
        text[match.start() : match.end()],
        target,
        anchor,
        "embed" if match.group(1) else "link",
        "markdown" if target else "wiki",
    )


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
    """A Markdown link's path relative to its note's folder, normalised; None when it climbs
    out of the vault."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
    return None if joined == ".." or joined.startswith("../") else joined
