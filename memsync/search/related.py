"""Related notes: the notes nearest in meaning to one note, from what the index already holds
(its chunks' vectors and the keyword index; no model runs). Two sides, each on the calibrated
scale of a search's legs, fused with the search's weights:

- the vector side: each of the note's chunks (MAX_PROBES of them, spread over a long note) asks
  for its nearest chunks by its own vectors; a chunk's cosine with the note is its best with any
  of them, calibrated as a query's is (cosines);
- the keyword side: a "more like this" from the note's own distinctive words (the TERMS of
  highest tf-idf, the index's chunk counts giving idf), searched as any of them, BM25 calibrated
  as a query's (calibration), anchored at the best match among the other notes.

A note scores by its best chunk on each side; it is shown by the chunk that scores best both
ways, with the lines of that chunk that make it related. Itself excluded; one entry per note."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import fts
from ..chunking import read_window_lines
from ..store.protocols import ChunkRow, StoreReader
from .calibration import calibrate_bm25, coverage
from .options import Options, pool_size
from .pipeline import KEYWORD_ONLY, Hit, resolved_mode
from .snippets import snippet

TERMS = 25  # the note's distinctive words the keyword side searches for (more-like-this's)
# a word held by more chunks than this share is left out, as Lucene's more-like-this leaves out
# its max_doc_freq: it tells few notes apart, and it makes the keyword query slow (a vault's
# commonest words are in a chunk of three; benchmarks/NOTES.md)
MAX_SHARE = 0.2


@dataclass(frozen=True)
class Related:
    """What `memsync related` prints: the note asked about, the mode that really ran, what the
    user should know, and the notes related to it (a search's hits)."""

    note: str
    mode: str
    results: list[Hit] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # its JSON form: output.related_result


def distinctive_words(
    words: Sequence[str], chunk_counts: Mapping[str, int], total: int, size: int = TERMS
) -> list[str]:
    """The `size` of a note's `words` (fts.words) of highest tf-idf (tf: the word's share of
    them; idf: ln(total / the chunks holding it)); a word only one chunk holds finds nothing
    else, one held by more than MAX_SHARE of them tells little."""
    if not words or total <= 0:
        return []
    scored = {
        word: count / len(words) * math.log(total / chunk_counts[word])
        for word, count in Counter(words).items()
        if 2 <= chunk_counts.get(word, 0) <= max(2, MAX_SHARE * total)
    }
    weighed = [word for word, score in scored.items() if score > 0]  # in every chunk: no say
    return sorted(weighed, key=lambda word: (-scored[word], word))[:size]


@dataclass(frozen=True)
class Sides:
    """What each side says of the candidate chunks: calibrated scores by chunk id, and which of
    a chunk's windows is nearest its best probe (for the lines it shows)."""

    vector: Mapping[int, float] = field(default_factory=dict)
    text: Mapping[int, float] = field(default_factory=dict)
    nearest: Mapping[int, int] = field(default_factory=dict)


def related(
    store: StoreReader, note: str, text: str, lines: tuple[int, int] | None, options: Options
) -> Related:
    """The notes related to `note` (its `text`, or the lines `lines` of it): best first, at most
    options.limit, none under options.min_score, itself excluded; options.mode "keyword" or
    "vector" runs that side only."""
    own = [c for c in store.note_chunks(note) if lines is None or _overlaps(c, lines)]
    if not own:
        return Related(note, "none", notices=[f"{note} has no text in the index to relate by"])
    notices: list[str] = []
    probes = [c for c in own if c.embedding] if options.mode != "keyword" else []
    if options.mode != "keyword" and not probes:
        why = _no_vectors(store)
        notices.append(f"{why}: related by keyword only (the note's own distinctive words)")
    pool = pool_size(options.limit) + len(own)
    words: list[str] = []
    ranks: dict[int, float] = {}
    if options.mode != "vector" or not probes:
        words, ranks = _keyword_side(store, text, pool, options)
    vector: dict[int, float] = {}
    nearest: dict[int, int] = {}
    if probes:  # the one place related loads the vector side (numpy): not without vectors
        from .vector_side import nearest_to_probes, probe_means, probe_scores

        asking, means = probe_means(store, probes)
        near = nearest_to_probes(store, means, pool, options.only)
        rows = _others(store, [*near, *ranks], note)
        vector, nearest = probe_scores(store, asking, means, rows)
    else:
        rows = _others(store, list(ranks), note)
    # anchored at the best match of another note, as a query's at its best match: the note
    # itself matches its own words best of all, and every other note scored a fraction of it
    matched = [i for i in rows if i in ranks]
    text_scores = calibrate_bm25(
        {i: ranks[i] for i in matched}, {i: coverage(rows[i].text, words) for i in matched}
    )
    sides = Sides(vector, text_scores, nearest)
    mode = resolved_mode(options.mode, bool(probes), bool(words))
    return Related(note, mode, _hits(rows, sides, words, options), notices)


def _keyword_side(
    store: StoreReader, text: str, pool: int, options: Options
) -> tuple[list[str], dict[int, float]]:
    """The note's distinctive words, and the chunks holding any of them with their BM25 ranks."""
    spoken = fts.words(text)
    total, counts = store.word_chunks(spoken)
    words = distinctive_words(spoken, counts, total)
    if not words:
        return [], {}
    return words, dict(store.keyword_search(words, True, pool, options.only)[0])


def _others(store: StoreReader, ids: list[int], note: str) -> dict[int, ChunkRow]:
    """The chunks `ids` of notes other than `note`."""
    return {i: row for i, row in store.chunks(ids).items() if row.path != note}


def _overlaps(chunk: ChunkRow, lines: tuple[int, int]) -> bool:
    return chunk.start_line <= lines[1] and chunk.end_line >= lines[0]


def _no_vectors(store: StoreReader) -> str:
    if store.model_key() is None or not store.has_vectors():
        return KEYWORD_ONLY
    return "the note has no vectors yet (memsync index, or a running watch, embeds it)"


def _hits(
    rows: Mapping[int, ChunkRow], sides: Sides, words: Sequence[str], options: Options
) -> list[Hit]:
    """One hit per note: its score from its best chunk on each side (weighted as a search's
    legs), shown by its best chunk both ways; best first, thresholded and cut."""
    wv = options.vector_weight if sides.vector else 0.0
    wt = options.text_weight if sides.text else 0.0
    total = wv + wt or 1.0

    def fused(vector: float | None, text: float | None) -> float:
        return (wv * (vector or 0.0) + wt * (text or 0.0)) / total

    notes: dict[str, list[int]] = {}
    for i in rows:
        if i in sides.vector or i in sides.text:
            notes.setdefault(rows[i].path, []).append(i)
    hits = []
    for ids in notes.values():
        vector = max((sides.vector[i] for i in ids if i in sides.vector), default=None)
        text = max((sides.text[i] for i in ids if i in sides.text), default=None)
        score = fused(vector, text)
        if score < options.min_score:
            continue
        shown = max(ids, key=lambda i: (fused(sides.vector.get(i), sides.text.get(i)), -i))
        hits.append(_hit(rows[shown], sides, words, score, vector, text))
    hits.sort(key=lambda hit: (-hit.score, hit.path))
    return hits[: options.limit]


def _hit(
    row: ChunkRow,
    sides: Sides,
    words: Sequence[str],
    score: float,
    vector: float | None,
    text: float | None,
) -> Hit:
    """The note as a search's hit, its lines those of `row` that best show why it is related:
    the note's distinctive words they hold, near the window nearest the note."""
    held = sorted((w for w in words if w in row.text.lower()), key=len, reverse=True)
    focus = None
    window = sides.nearest.get(row.id)
    if window is not None and row.window_lines:
        spans = read_window_lines(row.window_lines)
        nearest = spans[window] if window < len(spans) else (0, 0)
        focus = nearest if nearest[1] > nearest[0] else None
    shown, first = snippet(row.text, held, row.start_line, focus=focus)
    return Hit(
        row.path, row.start_line, row.end_line, score, vector, text, shown, first, score, False
    )
