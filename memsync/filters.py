"""Which notes a search may return, pure: path globs, a date range and tags as a user types them
(`projects/`, `daily/2026-11-*.md`, `7d`, `#project/heron`), parsed into a NoteFilter that each
store applies inside both legs, before the top k."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from .errors import ArgumentError
from .metadata import expand, parse_day


@dataclass(frozen=True)
class NoteFilter:
    """Which notes a search may return: any of the path globs, a date range (inclusive,
    YYYY-MM-DD), every one of the tags. Each backend applies it inside both legs, before the top k."""

    paths: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    tags: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.paths or self.since or self.until or self.tags)


def note_filter(
    paths: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    tags: Sequence[str] = (),
    today: date | None = None,
) -> NoteFilter:
    """A search's filters from what a user typed; ArgumentError names the one that is wrong."""
    today = today or date.today()
    days = []
    for name, value in (("since", since), ("until", until)):
        try:
            days.append(parse_day(value, today).isoformat() if value else None)
        except ValueError as exc:
            raise ArgumentError(f"--{name}: {exc}") from None
    wanted = []
    for written in tags:
        # a tag holds no space or comma, so a value holding some is several tags, on every face
        for tag in [t for t in re.split(r"[\s,]+", written) if t] or [written]:
            expanded = expand(tag)
            if not expanded:
                raise ArgumentError(f"--tag {tag!r} names no tag")
            wanted.append(expanded[0])
    return NoteFilter(path_globs(paths), days[0], days[1], tuple(dict.fromkeys(wanted)))


def path_globs(patterns: Sequence[str]) -> tuple[str, ...]:
    """User path filters -> GLOB patterns over vault-relative paths: `projects/` (or `projects`)
    is that folder's notes (or that note), a pattern with `*`, `?` or `[` is a glob as written."""
    globs: list[str] = []
    for raw in patterns:
        pattern = raw.strip()
        while pattern.startswith("./"):
            pattern = pattern[2:]
        if pattern == ".":
            pattern = ""  # the whole vault
        if "\0" in pattern or pattern.startswith(("/", "~")) or ".." in pattern.split("/"):
            raise ArgumentError(f"path filter {raw!r} must be relative to the vault, without '..'")
        if any(ch in pattern for ch in "*?["):
            globs.append(pattern)
        elif pattern.strip("/"):
            folder = pattern.strip("/")
            globs += [folder, f"{folder}/*"]
    return tuple(dict.fromkeys(globs))
