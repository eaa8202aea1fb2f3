"""A note's lines as a shell or an agent reads them, and the one write memsync makes: an agent's,
opt-in, atomic (a temporary file in the same folder renamed over the note); the note a user or
an agent names (a path, or `[[name]]` as a link would write it, an alias accepted), and a note's
links and backlinks as `links` and memory_links give them."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from . import confined, vault
from .errors import ArgumentError, NoSuchNote, os_reason
from .text import NOTE_SUFFIXES, as_text, fold, is_hidden, split_lines, unescape_name
from .vault import SkipFile, read_note

if TYPE_CHECKING:
    from .store.protocols import LinkRow, StoreReader

MAX_LINES = 400  # lines one read returns
MAX_BYTES = 64 * 1024  # bytes one read returns
MAX_WRITE_BYTES = 256 * 1024  # bytes one write may add
WRITE_MODES = ("append", "create", "replace")
# an agent must not rewrite its own instructions (a prompt-injection defence)
PROTECTED = ("AGENTS.md", "SOUL.md", "USER.md", "IDENTITY.md", "MEMORY.md", ".memsyncignore")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_umask()  # read once, at import: os.umask is process-wide


@dataclass(frozen=True)
class Lines:
    path: str
    start_line: int
    end_line: int  # the last line returned; start_line - 1 when none
    total_lines: int
    text: str  # the lines, joined by newlines
    truncated: bool  # more lines were asked for than one read returns
    copy: str | None = None  # not the file: which copy was read ("the indexed copy, ...")

    @property
    def citation(self) -> str:
        return citation(self.path, self.start_line, self.end_line)

    def rest(self) -> str | None:
        """What to ask for next when the read was cut."""
        if not self.truncated:
            return None
        return (
            f"lines {self.start_line}-{self.end_line} of {self.total_lines} shown (a read returns "
            f"at most {MAX_LINES} lines or {MAX_BYTES // 1024} KB): ask for start_line="
            f"{self.end_line + 1} for the rest"
        )

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "citation": self.citation, "note": self.rest()}


def citation(path: str, start: int, end: int) -> str:
    """How an agent cites lines of a note: `path#Lstart-Lend`."""
    return f"{path}#L{start}-L{end}"


class WrittenLines(NamedTuple):
    start_line: int
    end_line: int
    sha256: str  # of the note's bytes now: what the index must hold once it has seen the write


MAX_PATH_BYTES = 1024  # a vault-relative path an agent may name; a part is at most 255 bytes


def note_path(rel: object) -> str:
    """Pure: an untrusted vault-relative path in its one spelling (`/` between folders, no `.`),
    or ArgumentError when it could never name a note inside a vault (`..`, absolute, `~`, NUL,
    too long, not Markdown)."""
    if not isinstance(rel, str) or not rel.strip():
        raise ArgumentError("a note's path relative to the vault is required, e.g. projects/x.md")
    if "\0" in rel:
        raise ArgumentError("the path contains a NUL byte")
    if "\\" in rel and os.sep == "\\":  # a name may hold a backslash on Linux and macOS
        raise ArgumentError(f"{rel!r}: use / between folders")
    text = rel.strip()
    if text.startswith(("/", "~")) or (len(text) > 1 and text[1] == ":"):
        raise ArgumentError(f"{rel!r} must be relative to the vault (no leading /, ~ or drive)")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ArgumentError(f"{rel!r} must not contain '..'")
    if not parts:
        raise ArgumentError(f"{rel!r} names no note")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES or any(
        len(part.encode("utf-8", "surrogatepass")) > 255 for part in parts
    ):
        raise ArgumentError("the path is too long")
    clean = "/".join(parts)
    if not parts[-1].lower().endswith(NOTE_SUFFIXES):
        raise ArgumentError(f"{clean} is not a Markdown note (.md or .markdown)")
    return clean


def checked_path(
    root: Path, rel: object, rules: vault.IgnoreRules, *, existing: bool = True
) -> str:
    """An untrusted vault-relative path (an agent's) as the note it names, or ArgumentError saying
    why not: never outside the vault (`..`, absolute, `~`, a symlink out), never hidden, ignored
    or other than Markdown. `existing=False` also admits a note still to be created."""
    clean = note_path(rel)
    if rules.skips_path(clean):
        raise ArgumentError(
            f"{clean} is hidden or ignored (.memsyncignore): memsync does not index it"
        )
    verdict = vault.note_at(root, clean, rules)
    if isinstance(verdict, vault.Skip):
        raise ArgumentError(f"{clean}: {verdict.reason}")
    if verdict is not None:
        return clean
    if existing:
        raise NoSuchNote(f"no note at {clean}: give its path inside the vault, as query prints it")
    reason = vault.why_not_creatable(root, clean)
    if reason:
        raise ArgumentError(f"{clean}: {reason}")
    return clean


def parse_location(location: str) -> tuple[str, int | None, int | None]:
    """`path`, `path:N` or `path:N-M`, exactly as `memsync query` prints a result."""
    path, sep, lines = location.rpartition(":")
    if not sep or not re.fullmatch(r"\d+(-\d+)?", lines):
        return location, None, None
    first, _, last = lines.partition("-")
    return path, int(first), int(last) if last else int(first)


@dataclass(frozen=True)
class NoteRequest:
    """One read of a note as any face is asked it (`memsync get`, memory_get, /api/get, the
    page), made by `note_request`: a link (`[[Note]]`, `[[Note#Heading]]`, `[[Note#^block]]`, an
    alias in brackets) or a path, with lines given apart (an agent's start_line, end_line) or
    written after it as query prints them (`path:N`, `path:N-M`)."""

    written: str
    start: int | None = None
    end: int | None = None
    # the location as query's text printed it (the CLI's, which escapes names), not as its data
    # gives it (the API's, MCP's): an escaped name is then the likelier reading
    as_printed: bool = False

    @property
    def link(self) -> tuple[str, str | None] | None:
        """(the note's name, its anchor) where the request is one wikilink, read as `get` reads
        it; a path's request never loads the links room."""
        if "[[" not in self.written:
            return None
        from .links.parse import wikilink_location

        return wikilink_location(self.written)

    @property
    def is_link(self) -> bool:
        return self.link is not None

    @property
    def whole_note(self) -> bool:
        """Asks for a whole note: no lines, no section."""
        link = self.link
        if link is not None:
            return link[1] is None
        return self.start is None and self.end is None and parse_location(self.written)[1] is None

    def readings(self) -> list[tuple[str, int | None, int | None]]:
        """The (path, start, end) a path may mean, the likeliest first: lines written after it
        before the name taken whole, and each name as given before its reading as query's text
        escapes names (`new\\nline.md` for a name holding a newline), or after it `as_printed`."""
        written = [(self.written, self.start, self.end)]
        if self.start is None and self.end is None:
            path, first, last = parse_location(self.written)
            if first is not None:
                written.insert(0, (path, first, last))
        found: list[tuple[str, int | None, int | None]] = []
        for path, first, last in written:
            names = (path, unescape_name(path))
            for name in reversed(names) if self.as_printed else names:
                if (name, first, last) not in found:
                    found.append((name, first, last))
        return found


def note_request(
    location: str, start: int | None = None, end: int | None = None, *, as_printed: bool = False
) -> NoteRequest:
    """The one parse of a request for a note's lines, with one set of messages for every face."""
    if not location:
        raise ArgumentError(
            "give a note: PATH, PATH:N or PATH:N-M as query prints it, or [[Note]], "
            "[[Note#Heading]], [[Note#^block]]"
        )
    request = NoteRequest(location, start, end, as_printed)
    if request.is_link and (start is not None or end is not None):
        raise ArgumentError(
            f"{location} names its own lines: give start and end lines with a note's path"
        )
    return request


def read_lines(
    root: Path,
    rel: str,
    start: int | None,
    end: int | None,
    max_file_bytes: int,
    capped: bool = True,
) -> Lines:
    """Lines start..end (1-based, inclusive; whole note by default) of a note, read from disk now;
    `capped` (an agent's read): at most MAX_LINES lines and MAX_BYTES bytes.
    `rel` must come from checked_path."""
    try:
        note = read_note(root, rel, max_file_bytes)
    except SkipFile as skip:
        raise ArgumentError(f"{rel}: {skip}") from None
    return lines_of(rel, note.text, start, end, capped)


def lines_of(
    rel: str,
    text: str,
    start: int | None,
    end: int | None,
    capped: bool = True,
    copy: str | None = None,
) -> Lines:
    """Pure: lines start..end of a note's text, numbered as in the file; `copy` says which copy
    the text is when it is not the file read now."""
    lines = split_lines(text)
    total = len(lines)
    first = 1 if start is None else start
    last = total if end is None else end
    if first < 1 or last < first - 1 or (first > total and total > 0) or (total == 0 and first > 1):
        raise ArgumentError(f"{rel} has {total} lines: lines {first}-{last} are out of range")
    last = min(last, total)
    returned: list[str] = []
    size = 0
    for line in lines[first - 1 : last]:
        size += len(line.encode("utf-8", "replace")) + 1
        if capped and (len(returned) == MAX_LINES or (returned and size > MAX_BYTES)):
            break
        returned.append(line)
    end_line = first + len(returned) - 1
    return Lines(rel, first, end_line, total, "\n".join(returned), end_line < last, copy)


def protected(rel: str, patterns: tuple[str, ...]) -> bool:
    """A glob without `/` matches a note's name in any folder; one with `/`, the whole path.
    Names compare case-folded: on macOS and Windows `memory.md` *is* MEMORY.md."""
    path = fold(rel)
    name = path.rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatchcase(path if "/" in p else name, fold(p)) for p in (*PROTECTED, *patterns)
    )


def check_writable(rel: str, patterns: tuple[str, ...]) -> None:
    """An agent's write target, by its name: refused if the name hides characters or is
    protected (write_note checks the name the file has on disk too)."""
    hidden = [c for c in rel if is_hidden(c)]
    if hidden:
        codes = ", ".join(dict.fromkeys(f"U+{ord(c):04X}" for c in hidden))
        raise ArgumentError(
            f"{as_text(rel)!r} holds invisible or control characters ({codes}): memsync does not "
            "let an agent write such a name"
        )
    if protected(rel, patterns):
        raise ArgumentError(f"{rel} is protected: memsync does not let an agent write it")


def check_content(content: object) -> str:
    if not isinstance(content, str):
        raise ArgumentError("content must be text")
    if not content.strip():
        raise ArgumentError("content is empty")
    if len(content.encode("utf-8", "surrogatepass")) > MAX_WRITE_BYTES:
        raise ArgumentError(f"content is larger than {MAX_WRITE_BYTES // 1024} KB: write less")
    if "\x00" in content or any(0xD800 <= ord(c) <= 0xDFFF for c in content):
        raise ArgumentError("content is not text (NUL bytes or broken characters)")
    return content


def write_note(
    root: Path,
    rel: str,
    content: str,
    mode: str,
    heading: str = "",
    patterns: tuple[str, ...] = (),
) -> WrittenLines:
    """Write an agent's text into a note and return the line range it now holds. `append` adds at
    the end (a missing note is created, `heading` first), `create` fails if the note exists,
    `replace` rewrites an existing one. Line endings and permissions of an existing note are kept.
    The note is reached through descriptors walked inside the vault (a symlink inside it leads to
    the note it names, one leading out is refused), so the write lands in the vault or nowhere.
    `rel` must come from checked_path."""
    if mode not in WRITE_MODES:
        raise ArgumentError(f"mode must be one of {', '.join(WRITE_MODES)}, not {mode!r}")
    try:
        place = confined.locate(root, rel, make_folders=mode != "replace")
    except FileNotFoundError:  # a folder on its way is missing, and replace makes none
        raise ArgumentError(f"no note at {rel}: use mode create") from None
    except (confined.Refused, OSError) as exc:
        raise _refusal(rel, exc) from None
    with place:
        try:
            return _write_at(place, rel, content, mode, heading, patterns)
        except (confined.Refused, OSError) as exc:  # a folder this user may not write, a full disk
            raise _refusal(rel, exc) from None


def _refusal(rel: str, exc: Exception) -> ArgumentError:
    reason = os_reason(exc) if isinstance(exc, OSError) else str(exc)
    return ArgumentError(f"cannot write {rel}: {reason}")


def _write_at(
    place: confined.Place,
    rel: str,
    content: str,
    mode: str,
    heading: str,
    patterns: tuple[str, ...],
) -> WrittenLines:
    if place.real != rel and protected(place.real, patterns):
        raise ArgumentError(f"{rel} is protected: memsync does not let an agent write it")
    old, old_mode = _current(place, rel)
    if mode == "create" and old is not None:
        raise ArgumentError(f"{rel} exists: use mode append or replace")
    if mode == "replace" and old is None:
        raise ArgumentError(f"no note at {rel}: use mode create")
    try:
        before = old.decode("utf-8") if old is not None and mode == "append" else ""
    except UnicodeDecodeError:
        raise ArgumentError(f"{rel} is not UTF-8 text: memsync will not append to it") from None
    newline = "\r\n" if old is not None and b"\r\n" in old else "\n"
    body = content.replace("\r\n", "\n")
    if old is None and heading:
        body = f"{heading}\n\n{body}"
    if not body.endswith("\n"):
        body += "\n"
    if before and not before.endswith("\n"):
        before += newline
    start = before.count("\n") + 1
    added = body.count("\n")
    data = (before + body.replace("\n", newline)).encode("utf-8")
    place.replace(data, NEW_FILE_MODE if old_mode is None else old_mode)
    first = start + (2 if old is None and heading else 0)
    return WrittenLines(first, start + added - 1, hashlib.sha256(data).hexdigest())


def _current(place: confined.Place, rel: str) -> tuple[bytes | None, int | None]:
    """The note's bytes and mode now, or (None, None) when there is none. A note without a write
    bit is never written, by root either: replacing it needs only the folder's permission, so the
    bits are checked, not the failure of a write."""
    try:
        fd = place.open_file()
    except FileNotFoundError:
        return None, None
    with open(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not place.writable(st):
            raise ArgumentError(f"{rel} is read-only: memsync does not write a read-only note")
        return handle.read(), st.st_mode


# -- a note as named, and its links --------------------------------------------------------------

MOST_LINKS = 500  # listed by one answer of each kind: memory_tree's bound


@dataclass(frozen=True)
class Named:
    """A note as named: its path, and the heading or block asked for."""

    path: str
    anchor: str | None = None


def needs_links(store: StoreReader) -> None:
    if not store.has_links:
        raise ArgumentError(
            "this index was made by an older memsync and holds no links yet: the vault's "
            "writer must run memsync index or watch first"
        )


def named_note(store: StoreReader, text: str) -> Named | None:
    """`[[Note]]`, `[[folder/Note#Heading]]`, `[[alias]]`: the note it names (None when the
    text is not one wikilink); ArgumentError when no note has that name. Of several notes of one
    name, the one a link from the vault's root would open."""
    from .links.parse import wikilink_location  # the links room, only once a link is named
    from .links.resolve import key, name_key, path_key

    asked = wikilink_location(text)
    if asked is None:
        return None
    target, anchor = asked
    if not target:
        raise ArgumentError(f"{text} names no note: give [[Note#Heading]] or a path")
    needs_links(store)
    by, wanted = ("path", path_key(target)) if "/" in target else ("name", name_key(target))
    found = store.open_named(by, [wanted]) or store.open_named("alias", [key(target)])
    if found:
        return Named(found, anchor)
    raise ArgumentError(
        f"no note named {target!r} in the index (by file name, path or alias): memsync query "
        "--files finds notes by their words"
    )


@dataclass(frozen=True)
class Backlink:
    link: LinkRow
    text: str  # the linking line


@dataclass(frozen=True)
class NoteLinks:
    path: str
    outgoing: list[LinkRow]
    backlinks: list[Backlink]
    more: str = ""  # what was left out, beyond MOST_LINKS of a kind
