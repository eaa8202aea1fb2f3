"""Ranking, pure: the legs' calibrated scores fused, thresholded, decayed and spread over notes
(MMR). Plain values in, plain values out; `search` runs the legs through the store. Score rules,
and why they differ from the reference design:

- Fusion: vector_weight x v + text_weight x t (weights normalised; a leg that did not find the
  chunk counts 0, except the keyword leg for a chunk in another script than the query, which no
  keyword could match whole: that chunk scores at least its vector leg alone, the few words it
  shares with the query adding, never taking away; in RRF its vector rank counts for both legs;
  neither when the keyword leg found nothing at all). An exact match (calibration.is_exact)
  scores at least 0.9 + 0.1 x t (x v in vector mode), so it passes the threshold and comes first
  instead of vanishing at 0.3.
- The threshold is applied before temporal decay: decay re-orders results, it never hides an old
  but perfect match.
- A note's second result scores 0.9x, its third 0.81x, and so on (REPEAT): a few notes with
  many matching chunks otherwise fill the top 5, and a question whose answer is spread over
  several notes needs them all there. Each result still cites its own lines, and no line
  twice: a chunk overlapping a listed one of its note keeps its other lines, at 0.6x (OVERLAP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import TYPE_CHECKING

from .. import fts
from ..chunking import cut_window_lines
from ..metadata import note_date

if TYPE_CHECKING:
    import numpy as np

    from .options import Options

RRF_K = 60


@dataclass(frozen=True)
class Candidate:
    id: int
    path: str
    start_line: int
    end_line: int
    text: str
    vector_score: float | None
    text_score: float | None
    exact: bool = False
    bm25: float | None = None  # the raw leg values, for --explain
    cosine: float | None = None
    other_script: bool = False  # written in another script than the query
    # in a script neither the question's words nor their glosses were searched in (or found
    # nothing in): a missing keyword score is no evidence against it
    out_of_reach: bool = False
    glossed: bool = False  # its text score came from the question's words glossed in its script
    # the cosine of each of its windows (and a whole note's vector) with the question, in the
    # order embedded; None without the vector leg or its vectors
    window_cosines: np.ndarray | None = None
    window_lines: str | None = None  # the lines of each (chunking.Chunk.window_lines), if recorded
    named_by: str | None = None  # the note's name that holds every term (calibration.named)
    # no vector yet while the vector leg ran (a note saved since the last embedding)
    waiting: bool = False


def fuse(candidates: Sequence[Candidate], options: Options) -> list[tuple[Candidate, float]]:
    """Weighted fusion (or reciprocal-rank fusion), best first."""
    weighted = _weighted(candidates, options)
    if options.mode != "rrf":
        scored = weighted
    else:
        rrf = _reciprocal_ranks(candidates)
        scored = {c.id: rrf.get(c.id, 0.0) for c in candidates}
    # RRF ties often (first and second in one leg against second and first in the other): the
    # weighted score, not the path, orders them; then a match of the question's own words
    # before one of their glosses (in a small vault both are often floored at one score)
    return sorted(
        ((c, scored[c.id]) for c in candidates),
        key=lambda pair: (
            -pair[1],
            -weighted[pair[0].id],
            pair[0].glossed,
            pair[0].path,
            pair[0].start_line,
        ),
    )


def _weighted(candidates: Sequence[Candidate], options: Options) -> dict[int, float]:
    """Each candidate's weighted mean of its two legs' calibrated scores."""
    wv = options.vector_weight if options.mode != "keyword" else 0.0
    wt = options.text_weight if options.mode != "vector" else 0.0
    total = wv + wt or 1.0
    found_by_text = any(c.text_score is not None for c in candidates)
    scored = {}
    for c in candidates:
        score = (wv * (c.vector_score or 0.0) + wt * (c.text_score or 0.0)) / total
        if c.waiting and wt:
            # its words are all the evidence there is yet: weighted by the text's share, a
            # note just saved fell under min_score (`no results` until it was embedded)
            score = c.text_score or 0.0
        if c.out_of_reach and wv and found_by_text:
            # no keyword could match all of it: the keyword leg may add to its vector score,
            # never take from it (else being found by a few shared words, as a pool large
            # enough finds it, ranks it lower than not being found)
            score = max(score, c.vector_score or 0.0)
        if c.exact:
            # exact matches ordered among themselves by the keyword leg, or by the vectors
            # where it does not run (else they tie at 0.9 and the path decides)
            evidence = c.text_score if wt else c.vector_score
            score = max(score, 0.9 + 0.1 * (evidence or 0.0))
        scored[c.id] = score
    return scored


def _reciprocal_ranks(candidates: Sequence[Candidate]) -> dict[int, float]:
    """Reciprocal-rank fusion over both legs, 1.0 for a chunk first in both."""
    by_vector = sorted(
        (c for c in candidates if c.vector_score is not None),
        key=lambda c: -(c.vector_score or 0.0),
    )
    by_text = sorted(  # a match of the question's own words before an equal one of glosses
        (c for c in candidates if c.text_score is not None),
        key=lambda c: (-(c.text_score or 0.0), c.glossed),
    )
    ranks: dict[int, float] = {}
    for ordered in (by_vector, by_text):
        for c, rank in _note_ranks(ordered):
            ranks[c.id] = ranks.get(c.id, 0.0) + 1.0 / (RRF_K + rank)
    for c, rank in _note_ranks(by_vector if by_text else []):
        # no keyword could match all of it: its vector rank may count twice (not when the
        # keyword leg found nothing, which ranks every chunk by its vectors alone)
        if c.out_of_reach:
            ranks[c.id] = max(ranks[c.id], 2.0 / (RRF_K + rank))
    best = 2.0 / (RRF_K + 1)  # first in both legs
    return {i: r / best for i, r in ranks.items()}


def _note_ranks(ordered: Sequence[Candidate]) -> list[tuple[Candidate, int]]:
    """Each chunk's rank among notes: 1 + the other notes with a better chunk. A note's
    overlapping chunks say nearly the same, and counted apart they pushed its other chunk a rank
    down in every leg where it came second to itself."""
    ahead: set[str] = set()
    ranked = []
    for c in ordered:
        ranked.append((c, len(ahead - {c.path}) + 1))
        ahead.add(c.path)
    return ranked


def decay_factor(path: str, today: date, half_life: float) -> float:
    """exp(-ln2 / half_life x age); MEMORY.md and undated notes never decay; the future is age 0."""
    when = note_date(path)
    if when is None:
        return 1.0
    age = max((today - when).days, 0)
    return math.exp(-math.log(2) / half_life * age)


def _tokens(text: str) -> set[str]:
    return set(fts.cjk_spelled(text.lower()).split())


def jaccard(a: set[str], b: set[str]) -> float:
    """Shared words over all words; two empty texts say the same (nothing)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


DUPLICATE = 0.9  # the share of words at which two chunks say the same thing (see copies)


def copies(a: set[str], b: set[str], same_note: bool) -> bool:
    """Whether two chunks' words say the same thing: a Jaccard of DUPLICATE or more, or, for
    chunks of two notes, the smaller one's words that much inside the larger's. A copied note
    (a sync conflict, a note saved twice) whose lines moved a little is chunked on other lines,
    so its chunk holds one line fewer than the original's and their Jaccard is far lower (0.77
    for a 40-word chunk inside a 52-word one); two chunks of one note share their overlap lines
    by design and are told apart by Jaccard alone."""
    if jaccard(a, b) >= DUPLICATE:
        return True
    smaller = min(len(a), len(b))
    return not same_note and smaller > 0 and len(a & b) / smaller >= DUPLICATE


# two chunks of one note, or of notes that copy each other, are at least this alike to MMR: they
# share a subject whatever their words (benchmarks/NOTES.md)
SAME_NOTE = 0.5


def mmr(
    ranked: Sequence[tuple[Candidate, float]],
    lam: float,
    limit: int,
    penalties: dict[int, float] | None = None,
) -> list[tuple[Candidate, float]]:
    """Greedy maximal marginal relevance over token Jaccard similarity, and a chunk that nearly
    copies one already chosen (`copies`) is dropped, not merely penalised. Jaccard rather than
    embedding cosine: e5's cosines crowd 0.7-0.9 for any two chunks, so the penalty hardly told a
    copy from a neighbour, and four copies of one note filled the top 3 (see the evaluation).
    Chunks of one note are at least SAME_NOTE alike, and a note one of whose chunks was dropped
    as a copy counts as the chosen chunk's note: a copy's other chunks (a sync conflict's second
    section) are as little news as the original's."""
    words = {c.id: _tokens(c.text) for c, _ in ranked}
    note_of: dict[str, str] = {}  # a note that copies a chosen one -> that one's path

    def similarity(a: Candidate, b: Candidate) -> float:
        same = note_of.get(a.path, a.path) == note_of.get(b.path, b.path)
        return max(jaccard(words[a.id], words[b.id]), SAME_NOTE if same else 0.0)

    remaining = list(ranked)
    chosen: list[tuple[Candidate, float]] = []
    while remaining and len(chosen) < limit:
        best_index, best_value = 0, -math.inf
        for index, (candidate, score) in enumerate(remaining):
            overlap = max((similarity(candidate, c) for c, _ in chosen), default=0.0)
            value = lam * score - (1 - lam) * overlap
            if value > best_value:
                best_index, best_value = index, value
        pick = remaining.pop(best_index)
        if penalties is not None:
            overlap = max((similarity(pick[0], c) for c, _ in chosen), default=0.0)
            penalties[pick[0].id] = (1 - lam) * overlap
        chosen.append(pick)
        kept = []
        for item in remaining:
            if copies(words[item[0].id], words[pick[0].id], item[0].path == pick[0].path):
                note_of.setdefault(item[0].path, note_of.get(pick[0].path, pick[0].path))
            else:
                kept.append(item)
        remaining = kept
    return chosen


REPEAT = 0.9  # a note's next result counts this much of what its previous one would
# a chunk overlapping a result of its note listed above shows only its other lines, at this
# much of its score: chat chunks share a turn or two, and the answer is often the turn just past
# the better chunk's end; higher, such chunks crowd other notes out of the top 5
# (benchmarks/NOTES.md)
OVERLAP = 0.6


def spread_notes(
    ranked: list[tuple[Candidate, float, float]],
    factors: dict[int, float] | None = None,
    overlap: float = OVERLAP,
) -> list[tuple[Candidate, float, float]]:
    """Best first, each further result of a note already listed scores REPEAT times less, and
    one overlapping a listed result of its note keeps only its lines not listed yet, at
    `overlap` times (none left, or an overlap of 0: dropped), so that no line is shown twice;
    `factors` receives each result's factor (for --explain)."""
    shown: dict[str, list[tuple[int, int]]] = {}
    spread = []
    for c, score, relevance in ranked:
        listed = shown.setdefault(c.path, [])
        factor = REPEAT ** len(listed)
        trimmed = _unlisted_lines(c, listed)
        if trimmed is None or (trimmed is not c and not overlap):
            continue
        if trimmed is not c:
            factor *= overlap
        listed.append((trimmed.start_line, trimmed.end_line))
        if factors is not None:
            factors[c.id] = factor
        spread.append((trimmed, score * factor, relevance))
    spread.sort(key=lambda t: -t[1])  # stable: ties keep the order they came in
    return spread


def _unlisted_lines(c: Candidate, listed: Sequence[tuple[int, int]]) -> Candidate | None:
    """The chunk cut to its lines outside the ranges already listed: itself when it overlaps
    none, None when no line is left or what is left is not one run (a listed range inside it,
    or a long line's pieces, which share its number and do not map line for line)."""
    covered = {n for start, end in listed for n in range(start, end + 1)}
    free = [n for n in range(c.start_line, c.end_line + 1) if n not in covered]
    if len(free) == c.end_line - c.start_line + 1:
        return c
    lines = c.text.split("\n")
    if (
        not free
        or free[-1] - free[0] + 1 != len(free)
        or len(lines) != c.end_line - c.start_line + 1
    ):
        return None
    first, end = free[0] - c.start_line, free[-1] - c.start_line + 1
    kept = "\n".join(lines[first:end])
    window_lines = c.window_lines and cut_window_lines(c.window_lines, first, end)
    return replace(c, start_line=free[0], end_line=free[-1], text=kept, window_lines=window_lines)


def rank(
    candidates: Sequence[Candidate],
    options: Options,
    penalties: dict[int, float] | None = None,
    repeats: dict[int, float] | None = None,
) -> list[tuple[Candidate, float, float]]:
    """(candidate, final score, relevance before decay): fuse, threshold, decay, sort, spread
    over notes, MMR, limit. `penalties` receives each chunk's MMR penalty and `repeats` its
    note's repeat factor (for --explain)."""
    fused = [(c, s) for c, s in fuse(candidates, options) if s >= options.min_score]
    today = options.today or date.today()
    if options.decay:
        decayed = [(c, s * decay_factor(c.path, today, options.half_life), s) for c, s in fused]
    else:
        decayed = [(c, s, s) for c, s in fused]
    decayed.sort(key=lambda t: -t[1])  # stable: ties keep fuse's order
    # MMR asks for diverse results: the rest of a listed chunk is the least diverse of all
    decayed = spread_notes(decayed, repeats, 0.0 if options.mmr else OVERLAP)
    if options.mmr:
        relevance = {c.id: r for c, _, r in decayed}
        picked = mmr([(c, s) for c, s, _ in decayed], options.mmr_lambda, options.limit, penalties)
        return [(c, s, relevance[c.id]) for c, s in picked]
    return decayed[: options.limit]
