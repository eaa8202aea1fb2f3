"""Ranking, pure: each leg's scores calibrated, fused, decayed and diversified (MMR), with
snippets and the explanation of a score. Plain values in, plain values out; `search` runs the
legs through the store. Score rules, and why they differ from the reference design:

- Each leg is calibrated into [0, 1] so that one `min_score` means the same for every model. Text:
  the best BM25 match gets s = (-r) / (1 - r), the others s times their BM25 relative to the best,
  each floored at half the share of query terms it holds (BM25 is near 0 in a small vault), and a
  chunk holding every term lifted to 0.3 + 0.7 x that, one of a note whose file name holds every
  term (`heron`, projects/heron.md) to 0.5 + 0.5 x that. Vector: the cosine's z-score against this
  query's cosines with a sample of the index (e5's cosines crowd 0.7-0.9, other models' sit
  lower: the z-score does not care), squashed by a logistic centred at z = 2.5, of width 1.25
  (2.0 for a chunk in another script than the question's: across scripts cosines say less).
- Fusion: vector_weight x v + text_weight x t (weights normalised; a leg that did not find the
  chunk counts 0, except the keyword leg for a chunk in another script than the query, which no
  keyword could match whole: that chunk scores at least its vector leg alone, the few words it
  shares with the query adding, never taking away; in RRF its vector rank counts for both legs;
  neither when the keyword leg found nothing at all). A chunk holding every identifier of the query (`OPS-1432`, `2222`, `pg-main-2`)
  verbatim, and most of its other content words, is an exact match: it scores at least
  0.9 + 0.1 x t (x v in vector mode), so it passes the threshold and comes first instead of
  vanishing at 0.3.
- The threshold is applied before temporal decay: decay re-orders results, it never hides an old
  but perfect match.
- A note's second result scores 0.9x, its third 0.81x, and so on (REPEAT): a few notes with
  many matching chunks otherwise fill the top 5, and a question whose answer is spread over
  several notes needs them all there. Each result still cites its own lines, and no line
  twice: a chunk overlapping a listed one of its note keeps its other lines, at 0.6x (OVERLAP).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import TYPE_CHECKING

import numpy as np

from .. import fts
from ..chunking import cut_window_lines
from ..metadata import front_matter_lines, note_date
from ..vectors import placed_scripts

if TYPE_CHECKING:
    from .options import Options

_IDENTIFIER = re.compile(r"\S*\d\S*|\S+[-_./:#]\S+")
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
    vectors: bytes | None = None  # its windows' (and a whole note's) vectors, as embedded
    window_lines: str | None = None  # the lines of each (chunking.Chunk.window_lines), if recorded


# -- calibration ---------------------------------------------------------------------------------


# the logistic that maps a cosine's z-score to [0, 1]: 0.5 at Z_CENTRE. Wide enough that the
# keyword leg still orders chunks the vectors barely tell apart; narrower, a chunk a fraction of
# a spread nearer the question outweighs every keyword difference (benchmarks/NOTES.md)
Z_CENTRE, Z_WIDTH = 2.5, 1.25
# across scripts the small multilingual model's cosines say less (a short Chinese title lands
# near English pages on nothing they share), so the same z-score counts less there: a flatter
# logistic, and the question's glosses on the keyword leg order what the vectors barely tell
# apart. The width best for Chinese questions and sample_vault (benchmarks/NOTES.md)
Z_WIDTH_ACROSS = 2.0


def calibrate_cosine(
    cosines: np.ndarray, background: np.ndarray, width: float | np.ndarray = Z_WIDTH
) -> np.ndarray:
    """Cosine -> [0, 1] by its z-score against the query's cosines with a sample of the index
    (`width`: the logistic's, one for all or one per cosine)."""
    cosines = np.asarray(cosines, dtype=np.float64)
    if background.size < 8:
        clipped: np.ndarray = np.clip(cosines, 0.0, 1.0)  # too small an index to know its spread
        return clipped
    mean, spread = float(background.mean()), float(background.std())
    z = (cosines - mean) / max(spread, 1e-6)
    return 1.0 / (1.0 + np.exp(-(z - Z_CENTRE) / width))


MIN_NOTES = 4  # sampled notes of a script needed to place its mean (the spread is pooled)


def calibrate_by_script(
    cosines: np.ndarray,
    scripts: Sequence[str],
    background: np.ndarray,
    backdrop: Sequence[tuple[str, str]],
    query_script: str,
) -> np.ndarray:
    """calibrate_cosine with each script's own mean: a multilingual model puts a query nearer
    every text in its own language, so a Chinese note's cosine with an English question is
    measured from where Chinese notes sit, in the spread of every script around its own mean
    (pooled: a few vectors give a steady mean but no steady spread). `backdrop` holds each
    sampled chunk's (script, note); a script sampled from fewer than MIN_NOTES notes is measured
    as the whole sample is. A chunk in another script than the question's (`query_script`) is scored
    on the flatter Z_WIDTH_ACROSS."""
    cosines = np.asarray(cosines, dtype=np.float64)
    widths = np.array([Z_WIDTH if kind == query_script else Z_WIDTH_ACROSS for kind in scripts])
    overall = float(background.mean()) if background.size else 0.0
    means = script_means(background, backdrop)
    if _one_script(means, backdrop):
        return calibrate_cosine(cosines, background, widths)  # nothing to move
    centre = np.array([means.get(kind, overall) for kind, _ in backdrop]) if backdrop else 0.0
    pooled = background - centre + overall
    shifted = cosines - np.array([means.get(kind, overall) for kind in scripts]) + overall
    return calibrate_cosine(shifted, pooled, widths)


def script_means(background: np.ndarray, backdrop: Sequence[tuple[str, str]]) -> dict[str, float]:
    """The mean sampled cosine of each script sampled from MIN_NOTES notes or more. Notes, not
    chunks: the chunks of one long note share its subject as well as its language, so their mean
    is how near the question is to that note, and moving the note's chunks by it took away the
    very match (a Chinese question about the one long Chinese note of an English vault scored
    its chunks as average ones)."""
    kinds = np.array([kind for kind, _ in backdrop])
    return {
        kind: float(background[kinds == kind].mean())
        for kind in placed_scripts(backdrop, MIN_NOTES)
    }


def _one_script(means: dict[str, float], backdrop: Sequence[tuple[str, str]]) -> bool:
    """The sample holds one script (or none), placed by its own mean: nothing to move apart."""
    return len(means) < 2 and set(means) >= {kind for kind, _ in backdrop}


def script_shift_range(background: np.ndarray, backdrop: Sequence[tuple[str, str]]) -> float:
    """How far calibrate_by_script may move two chunks' cosines apart (0 with one script): a
    chunk of another script up to this much below the vector pool's last cosine may still rank
    above it once moved, so the pool is cut this much lower."""
    means = script_means(background, backdrop)
    if _one_script(means, backdrop):
        return 0.0
    placed = [*means.values(), float(background.mean())]
    return max(placed) - min(placed)


def coverage(text: str, terms: Sequence[str]) -> float:
    """The share of the query's terms found in the chunk (a stem or bigram counts as found)."""
    if not terms:
        return 0.0
    haystack = text.lower()
    found = sum(1 for term in terms if all(word in haystack for word in _stems(term)))
    return found / len(terms)


def glossed_coverage(text: str, glosses: Sequence[Sequence[str]]) -> float:
    """The share of the question's words of which the chunk holds a translation (`glosses`:
    each word's translations)."""
    if not glosses:
        return 0.0
    return sum(1 for words in glosses if coverage(text, words) > 0) / len(glosses)


def _stems(term: str) -> list[str]:
    # crude stemming, enough to see that "replications" and "running" hold "replication", "run"
    return [w[:-1] if len(w) > 4 and w.endswith("s") else w for w in term.split()]


EVERY_TERM = 0.3  # a chunk holding every term of the query scores at least this on the text leg


NAMED = 0.5  # a chunk of a note whose file name holds every term of the query: at least this


def named(path: str, terms: Sequence[str]) -> bool:
    """The note's file name holds every term of the query (`heron` and projects/heron.md, `li
    wei` and people/li-wei.md): a note's name says what it is about, while its text may hold
    the name less often than a short note that mentions it twice."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    words = set(_stems(" ".join(re.findall(r"[^\W_]+", fts.cjk_spelled(stem)))))
    return bool(terms) and all(set(_stems(term)) <= words for term in terms)


def calibrate_bm25(
    ranks: dict[int, float],
    covered: dict[int, float],
    best: float | None = None,
    named: Collection[int] = (),
) -> dict[int, float]:
    """BM25 ranks -> [0, 1]. The best match gets (-r)/(1-r), which says how strong a keyword match
    it is in this index; the others get that times their BM25 relative to the best, which keeps
    BM25's spread (the mapping alone crowds every good match near 0.95). Each is floored at half
    the share of the query's terms it holds: in a small vault BM25 is near 0 for every match (a
    word in half the notes has IDF 0) and the share of terms found is what tells match from noise.
    A chunk holding every term is then lifted: EVERY_TERM + (1 - EVERY_TERM) x its score. BM25's
    length normalisation puts a long chunk that holds every word of the question far below a short
    one that holds them too, and a question whose answer is spread over several notes (each holding
    its words, some at length) lost them to chunks holding fewer of its words. A chunk of a note
    the query names (`named`) is lifted the same way to at least NAMED.
    """
    if not ranks:
        return {}
    best = min(ranks.values()) if best is None else min(best, *ranks.values())
    top = fts.bm25_score(best)
    scores = {
        i: max(top * (r / best if best < 0 else 1.0), 0.5 * covered.get(i, 0.0))
        for i, r in ranks.items()
    }
    lifted = {
        i: EVERY_TERM + (1 - EVERY_TERM) * score if covered.get(i, 0.0) >= 1.0 else score
        for i, score in scores.items()
    }
    return {i: NAMED + (1 - NAMED) * s if i in named else s for i, s in lifted.items()}


def identifiers(query: str) -> list[str]:
    """Tokens a user types to find an exact thing: with a digit, or joined by - _ . / : #."""
    found = []
    for token in _IDENTIFIER.findall(query):
        token = token.strip("\"'()[]{}<>,;!?")
        if len(token) >= 2 and fts.WORD.search(token):
            found.append(token.lower())
    return found


def other_terms(query: str, idents: Sequence[str]) -> list[str]:
    """The query's content words that are not identifiers (`ssh`, `port` in `ssh port 2222`)."""
    kept = [t for t in query.split() if t.strip("\"'()[]{}<>,;!?").lower() not in idents]
    return fts.query_terms(" ".join(kept)) if kept else []


def is_exact(text: str, idents: Sequence[str], others: Sequence[str] = ()) -> bool:
    """The chunk holds every identifier of the query verbatim and most of its other content
    words: a number shared by chance (`2222` in an unrelated log) is no exact match."""
    if not idents:
        return False
    lowered = text.lower()
    for ident in idents:
        pattern = r"(?<![\w-])" + re.escape(ident) + r"(?![\w-])"
        if not re.search(pattern, lowered):
            return False
    return not others or coverage(text, others) > 0.5


# -- fusion, decay, MMR --------------------------------------------------------------------------


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


# -- snippets ------------------------------------------------------------------------------------


# what a line of the chunk's window nearest the question counts for in choosing a snippet,
# beside the question's words it holds: a nudge, so the words decide and the window breaks ties
# (benchmarks/NOTES.md)
FOCUS = 0.2


def snippet(
    text: str,
    words: list[str],
    start_line: int,
    width: int = 3,
    focus: tuple[int, int] | None = None,
) -> tuple[str, int]:
    """The `width` consecutive lines of the chunk that best show why it was found, and where
    they start: the query's words they hold, and the lines of its window nearest the question
    (`focus`: 0-based, the end excluded), since a chunk found by meaning may hold none of its
    words."""
    lines = text.split("\n")
    # front matter is no content to show around a match: `tags: [...]` and `---` above a title
    metadata = front_matter_lines(text) if start_line == 1 else 0
    near = range(*focus) if focus else range(0)
    lowered = [line.lower() for line in lines]
    # a word counts once, shared among the lines that hold it: a speaker's name on every line
    # of a chat tells none of them apart
    holding = {w: sum(1 for line in lowered if w in line) for w in words}

    def line_score(index: int, line: str) -> float:
        hits = sum(1 / holding[w] for w in words if w in lowered[index])
        if not line.strip() or index < metadata:
            return hits
        return hits + 0.1 + (FOCUS if index in near else 0.0)

    scores = [line_score(i, line) for i, line in enumerate(lines)]
    best, best_value = 0, -1.0
    for i in range(max(len(lines) - width + 1, 1)):
        value = sum(scores[i : i + width])
        if value > best_value:
            best, best_value = i, value
    chosen = lines[best : best + width]
    while chosen and not chosen[0].strip():
        chosen.pop(0)
        best += 1
    while chosen and not chosen[-1].strip():
        chosen.pop()
    clipped = [line if len(line) <= 240 else line[:237] + "..." for line in chosen]
    return "\n".join(clipped), start_line + best


def query_words(query: str) -> list[str]:
    """The words of the query's terms, longest first (for snippets and highlighting)."""
    return sorted({w for t in fts.query_terms(query) for w in t.split()}, key=len, reverse=True)


def explain(
    candidate: Candidate,
    score: float,
    relevance: float,
    penalties: dict[int, float],
    repeats: dict[int, float],
    nearest: tuple[int, int] | None = None,
) -> dict[str, object]:
    """Why a result scored what it did: each leg raw and calibrated, the exact-match rule, the
    decay factor, the note's repeat factor and the MMR penalty; and the lines of its window
    nearest the question, which the lines shown lean on (`nearest`: 0-based in the chunk, the
    end excluded)."""
    repeat = repeats.get(candidate.id, 1.0)
    first = candidate.start_line
    return {
        "bm25": rounded(candidate.bm25),
        "text_score": rounded(candidate.text_score),
        "cosine": rounded(candidate.cosine),
        "nearest_window": [first + nearest[0], first + nearest[1] - 1] if nearest else None,
        "vector_score": rounded(candidate.vector_score),
        "exact_match": candidate.exact,
        "other_script": candidate.other_script,
        "glossed": candidate.glossed,
        "fused": round(relevance, 4),
        "decay": round(score / relevance / repeat, 4) if relevance else 1.0,
        "note_repeat": round(repeat, 4),
        "mmr_penalty": rounded(penalties.get(candidate.id)),
    }


def rounded(value: float | None) -> float | None:
    """A score as JSON shows it: four decimals, or null for a leg that did not run."""
    return None if value is None else round(value, 4)
