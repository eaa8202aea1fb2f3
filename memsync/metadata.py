"""What a note says about itself, pure: its date, title and tags, from its name, its YAML front
matter and its inline #tags; and the dates a user types (`7d`, `yesterday`, `2026-11-01`)."""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

DAILY_NAME = re.compile(
    r"(?:^|/)(?:daily|memory)/(?:.*/)?(\d{4})-(\d{2})-(\d{2})\.(?:md|markdown)$"
)
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$", re.S | re.M)
_FENCE_MARKS = ("```", "~~~")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
# a tag starts after a space, a line start or an opening bracket (never inside a URL: page#part),
# holds letters (any script), digits, _ - /, and at least one character that is not a digit
_TAG = re.compile(r"(?:(?<=^)|(?<=[\s(\[{,;]))#([^\W\d_/-][\w/-]*|[\w/-]*[^\W\d][\w/-]*)", re.M)
# how a heading opens; its title is cut by heading() (the regex `[ \t]+(.+?)[ \t#]*$` took time
# quadratic in a line of spaces or `#`s: 11 s for one line of 64 KB)
_HEADING_OPENS = re.compile(r"(#{1,6})([ \t]+)")
_INDENTED_HEADING_OPENS = re.compile(r" {0,3}(#{1,6})([ \t]+)")
_HEADING_LINE = re.compile(r"^#{1,6}[ \t][^\n]*", re.M)
# recorded with the index's rules: when these change, every note is read again
RULES = "meta-3"


@dataclass(frozen=True)
class NoteMeta:
    title: str | None
    date: str | None  # YYYY-MM-DD the note is about: its daily name, else its front matter
    tags: tuple[str, ...]  # lower case, without '#'; a nested tag also gives its ancestors
    warning: str | None = None  # front matter that could not be read
    has_heading: bool = False
    aliases: tuple[str, ...] = ()  # the note's other names (aliases:, alias:)


def note_date(path: str) -> date | None:
    """The date in a daily note's name (daily/ or memory/ YYYY-MM-DD.md); None for others."""
    match = DAILY_NAME.search(path)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def expand(tag: str) -> list[str]:
    """`project/heron` -> itself and `project`: a nested tag matches its ancestors, never its
    last part alone."""
    parts = [p for p in tag.strip().strip("'\"").lstrip("#").lower().split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


MAX_TITLE = 1024  # characters of a front-matter title
MAX_TAGS = 100  # tags in front matter, each at most MAX_TITLE characters
# characters of front matter read as YAML: PyYAML reads about 150 KB a second of the slowest
# shapes (a flow list `[n, n, ...]`: 6.7 s for 1 MB), and notes have no use for more
MAX_FRONT_MATTER = 32_768


class _Malformed(Exception):
    """Front matter memsync will not use: the note keeps its text, not its metadata."""


@functools.cache  # made once: a vault parses thousands of front matters
def _loader() -> type[Any]:
    """YAML's safe loader without aliases: nine levels of nested aliases in 400 bytes expand to
    gigabytes (a "billion laughs"), and notes have no use for them."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise _Malformed("front matter uses YAML aliases (*name)")
            return super().compose_node(parent, index)

    return NoAliases


def front_matter_lines(text: str) -> int:
    """How many lines the front matter takes at the top of a note's text (0 without one)."""
    match = _FRONT_MATTER.match(text)
    return text.count("\n", 0, match.end()) + 1 if match else 0


def _front_matter(text: str) -> tuple[dict[str, object], str | None, int]:
    """The front matter as a mapping, a warning if it is malformed, and where the body starts.
    Any failure (bad YAML, an impossible date, a 5,000-digit number, deep nesting, aliases, a
    huge title or tag list, more than MAX_FRONT_MATTER characters) costs the note its metadata
    only: its text is indexed."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, None, 0
    if len(match.group(1)) > MAX_FRONT_MATTER:
        return (
            {},
            f"front matter is longer than {MAX_FRONT_MATTER:,} characters: indexed as text",
            match.end(),
        )
    import yaml

    try:
        data = yaml.load(match.group(1), Loader=_loader())  # noqa: S506 - a safe loader
        if isinstance(data, dict):
            _check_size(data)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        return {}, f"front matter is not valid YAML{line}: indexed as text", match.end()
    except _Malformed as exc:
        return {}, f"{exc}: indexed as text", match.end()
    except Exception as exc:  # noqa: BLE001 - one note's metadata never stops a vault
        return {}, f"front matter cannot be read ({_reason(exc)}): indexed as text", match.end()
    if data is None:
        return {}, None, match.end()
    if not isinstance(data, dict):
        return {}, "front matter is not a mapping of keys: indexed as text", match.end()
    return data, None, match.end()


def _reason(exc: Exception) -> str:
    """A short, bounded reason: YAML's messages may quote the whole value."""
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _check_size(data: dict[object, object]) -> None:
    title = data.get("title")
    if title is not None and len(str(title)) > MAX_TITLE:
        raise _Malformed(f"front matter title is longer than {MAX_TITLE} characters")
    tags = _listed(data.get("tags")) + _listed(data.get("tag"))
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TITLE for t in tags):
        raise _Malformed(f"front matter has more than {MAX_TAGS} tags or a tag too long")
    aliases = _aliases(data.get("aliases")) + _aliases(data.get("alias"))
    if len(aliases) > MAX_TAGS or any(len(a) > MAX_TITLE for a in aliases):
        raise _Malformed(f"front matter has more than {MAX_TAGS} aliases or an alias too long")


def _listed(value: object) -> list[str]:
    if isinstance(value, str):
        return [t for t in re.split(r"[,\s]+", value) if t]
    if isinstance(value, (list, tuple)):
        return [str(t) for t in value if t is not None and str(t).strip()]
    return []


def _aliases(value: object) -> list[str]:
    """A list of names, or a string of names separated by commas (an older Obsidian's form)."""
    if isinstance(value, str):
        return [a.strip() for a in value.split(",") if a.strip()]
    if isinstance(value, (list, tuple)):
        return [str(a).strip() for a in value if a is not None and str(a).strip()]
    return []


def _as_day(value: object) -> str | None:
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip()[:10]).isoformat()
        except ValueError:
            return None
    return None


def heading(line: str, indented: bool = False, titled: bool = True) -> tuple[int, str] | None:
    """A line's heading level and title as written (`## Title ##` -> (2, "Title")), None for
    another line: what `^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$` takes (without ` {0,3}` unless
    `indented`, `(.*?)` unless `titled`), in time linear in the line."""
    opened = (_INDENTED_HEADING_OPENS if indented else _HEADING_OPENS).match(line)
    if opened is None:
        return None
    body = line[opened.end() :]
    title = body.rstrip(" \t#")
    if not title and titled:  # `(.+?)` takes a character: the first `#`, or a space given back
        if body:
            title = body[0]
        elif len(opened.group(2)) > 1:
            title = opened.group(2)[-1]
        else:
            return None
    return len(opened.group(1)), title


def _first_heading(body: str) -> str | None:
    for line in _HEADING_LINE.finditer(body):
        found = heading(line.group())
        if found is not None:
            return found[1]
    return None


def _without_fences(body: str) -> str:
    """The body with each fenced block (a line opening with ``` or ~~~ to the next line holding
    that mark alone) as one space; an opening never closed is left as it is."""
    lines = body.split("\n")
    closing = {
        mark: [n for n, line in enumerate(lines) if line.strip(" \t") == mark]
        for mark in _FENCE_MARKS
    }
    kept: list[str] = []
    number = 0
    while number < len(lines):
        closers = closing.get(lines[number].lstrip(" \t")[:3], [])
        after = bisect.bisect_right(closers, number)
        if after < len(closers):
            kept.append(" ")
            number = closers[after] + 1
            continue
        kept.append(lines[number])
        number += 1
    return "\n".join(kept)


def inline_tags(body: str) -> list[str]:
    """#tags in the text, not in code (fenced or inline), not in URLs, not headings."""
    fenced = any(mark in body for mark in _FENCE_MARKS)
    text = _INLINE_CODE.sub(" ", _without_fences(body) if fenced else body)
    return _TAG.findall(text)


def parse(path: str, text: str) -> NoteMeta:
    data, warning, body_start = _front_matter(text)
    body = text[body_start:]
    tags: list[str] = []
    for raw in _listed(data.get("tags")) + _listed(data.get("tag")) + inline_tags(body):
        tags += expand(raw)
    first_heading = _first_heading(body)
    title = data.get("title")
    named = note_date(path)
    return NoteMeta(
        title=str(title).strip()
        if title
        else (first_heading.strip() if first_heading is not None else None),
        date=named.isoformat() if named else _as_day(data.get("date")),
        tags=tuple(dict.fromkeys(t for t in tags if t)),
        warning=warning,
        has_heading=first_heading is not None,
        aliases=tuple(dict.fromkeys(_aliases(data.get("aliases")) + _aliases(data.get("alias")))),
    )


def day_of(meta: NoteMeta, mtime_ns: int) -> str:
    """The date a filter sees: the note's own, else its modification day (local time)."""
    return meta.date or datetime.fromtimestamp(mtime_ns / 1e9).date().isoformat()


def parse_day(text: str, today: date) -> date:
    """`YYYY-MM-DD`, `today`, `yesterday`, or N days/weeks/months ago (`7d`, `2w`, `3m`: a month
    is 30 days). ValueError says what is accepted."""
    value = text.strip().lower()
    if value == "today":
        return today
    if value == "yesterday":
        return today - timedelta(days=1)
    match = re.fullmatch(r"(\d{1,5})([dwm])", value)
    try:
        if match:
            days = int(match.group(1)) * {"d": 1, "w": 7, "m": 30}[match.group(2)]
            return today - timedelta(days=days)
        return date.fromisoformat(value)
    except (ValueError, OverflowError):  # 99999m: before year 1
        raise ValueError(
            f"{text!r} is not a date: use YYYY-MM-DD, today, yesterday, or Nd / Nw / Nm ago"
        ) from None
