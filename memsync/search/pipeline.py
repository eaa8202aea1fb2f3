"""Hybrid retrieval as named steps: run the legs (keyword through the store's BM25, vector through
the embedder and the store's nearest neighbours), resolve which mode really ran, gather the
candidates, rank them (ranking, pure) and return hits with the reasons a leg did not run."""

from __future__ import annotations

import logging
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from .. import fts
from ..chunking import read_window_lines
from ..config import data_dir
from ..embedders import Embedder, Reranker
from ..errors import EmbeddingError, StoreError
from ..store.protocols import ChunkRow, StoreReader
from ..vectors import best_cosine, nearest_window
from .glossary import (
    segments,
    shared_glossary,
    translations,
    unavailable,
    written_in_capitals,
)
from .options import Options
from .ranking import (
    MIN_NOTES,
    Candidate,
    calibrate_bm25,
    calibrate_by_script,
    coverage,
    explain,
    glossed_coverage,
    identifiers,
    is_exact,
    named,
    other_terms,
    query_words,
    rank,
    rounded,
    script_shift_range,
    snippet,
)

log = logging.getLogger("memsync.search")
SAMPLE_CHUNKS = 256  # chunks whose nearest windows calibrate a query's cosines
MIN_POOL = 40  # candidates a leg brings at least: what -n 10 brings (LoCoMo, SciFact measure there)


@dataclass(frozen=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    score: float
    vector_score: float | None
    text_score: float | None
    snippet: str
    snippet_start: int
    relevance: float  # the score before temporal decay, which the threshold saw
    exact: bool
    explain: dict[str, object] | None = None  # with --explain: how the score came about
    rerank_score: float | None = None  # the reranker's, when it ordered the results
    text: str = ""  # the lines it cites, whole: what a reranker reads

    def as_dict(self) -> dict[str, object]:
        extra: dict[str, object] = {} if self.explain is None else {"explain": self.explain}
        if self.rerank_score is not None:
            extra["rerank_score"] = round(self.rerank_score, 4)
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": round(self.score, 4),
            "vector_score": rounded(self.vector_score),
            "text_score": rounded(self.text_score),
            "snippet": self.snippet,
            "snippet_start_line": self.snippet_start,
            "relevance": round(self.relevance, 4),
            "exact_match": self.exact,
            "hybrid_match": self.vector_score is not None and self.text_score is not None,
            **extra,
        }


@dataclass
class Outcome:
    query: str
    mode: str  # what really ran
    requested_mode: str
    results: list[Hit] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "query": self.query,
            "mode": self.mode,
            "requested_mode": self.requested_mode,
            "notices": self.notices,
            "results": [hit.as_dict() for hit in self.results],
        }


# -- the steps -----------------------------------------------------------------------------------


@dataclass
class Legs:
    """What the legs found: calibrated scores by chunk id, and the raw values for --explain."""

    vector: dict[int, float] = field(default_factory=dict)  # calibrated with the candidates
    cosines: dict[int, float] = field(default_factory=dict)
    query_vector: np.ndarray | None = None
    background: np.ndarray | None = None  # sampled chunks' nearest-window cosines
    # each sampled chunk's (script, note)
    backdrop: list[tuple[str, str]] = field(default_factory=list)
    bm25: dict[int, float] = field(default_factory=dict)
    best_bm25: float | None = None  # the whole index's best rank: the keyword calibration's anchor
    terms: list[str] = field(default_factory=list)
    # the question's words in the other language (a list per word), and what they found
    glosses: list[list[str]] = field(default_factory=list)
    gloss_bm25: dict[int, float] = field(default_factory=dict)
    best_gloss_bm25: float | None = None
    ran_vector: bool = False
    ran_text: bool = False


def search(
    store: StoreReader,
    query: str,
    options: Options,
    embedder: Embedder | None,
    unavailable: str = "",
    reranker: Reranker | None = None,
) -> Outcome:
    """Run the legs the mode asks for, say which really ran and why a leg did not, rank, and
    let the reranker (when one is given) order the top candidates."""
    outcome = ranked(store, query, options, embedder, unavailable, reranker is not None)
    return outcome if reranker is None else reranked(outcome, options, reranker)


def ranked(
    store: StoreReader,
    query: str,
    options: Options,
    embedder: Embedder | None,
    unavailable: str = "",
    to_rerank: bool = False,
) -> Outcome:
    """search() without the rerank, all its work on the store; `to_rerank`: the results are
    the candidates `reranked` orders and cuts to the limit, at least `rerank_top` of them."""
    outcome = Outcome(query, options.mode, options.mode)
    legs = Legs()
    query_script = fts.script(query)
    vector_runs = False
    if options.mode in ("hybrid", "vector", "rrf"):
        reason = _vector_unavailable(store, embedder, unavailable)
        if reason:
            outcome.notices.append(f"vector search unavailable: {reason}")
        vector_runs = not reason
    keyword_notices: list[str] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsync-query") as beside:
        keyword: Future[None] | None = None
        if options.mode in ("hybrid", "keyword", "rrf"):
            if vector_runs:
                # on a second connection (opened there), while this one embeds the query and
                # searches the vectors: SQLite, psycopg, the model and numpy release the GIL
                keyword = beside.submit(
                    lambda: _keyword_legs(
                        _second(store), query, query_script, options, legs, keyword_notices
                    )
                )
            else:
                _keyword_legs(store, query, query_script, options, legs, keyword_notices)
        if vector_runs:
            assert embedder is not None
            try:
                query_vector = embedder.embed_query(query)
            except EmbeddingError as exc:
                outcome.notices.append(f"vector search unavailable: {exc}")
            else:
                _vector_leg(store, query, query_vector, options, legs, outcome.notices)
        if keyword is not None:
            keyword.result()
    if legs.ran_text and query_script == "latin" and "cjk" in _sampled_scripts(store, legs):
        _glossed_leg(store, query, query_script, options, legs, keyword_notices)  # holds Chinese
    outcome.notices += keyword_notices
    outcome.mode = resolved_mode(options.mode, legs.ran_vector, legs.ran_text)
    candidates = _candidates(store, query, query_script, legs)
    limit = max(options.limit, options.rerank_top) if to_rerank else options.limit
    ranking = replace(options, mode=outcome.mode, limit=limit)
    outcome.results = _hits(candidates, query, ranking, legs)
    return outcome


def reranked(outcome: Outcome, options: Options, reranker: Reranker) -> Outcome:
    """`ranked`'s outcome with its first `rerank_top` results in the reranker's order (the
    whole lines each cites are what it reads) and the rest after them in fused order, cut to
    the limit; all in fused order, with a notice, when it fails or does not answer within the
    query's time."""
    read = outcome.results[: options.rerank_top]
    try:
        scores = reranker.scores(outcome.query, [h.text for h in read]) if read else []
    except EmbeddingError as exc:
        outcome.notices.append(f"results not reranked: {exc}")
        scores = []
    fused = list(enumerate(outcome.results, start=1))
    order = sorted(fused[: len(scores)], key=lambda pair: -scores[pair[0] - 1])
    outcome.results = [
        _after_rerank(hit, rank, scores, options) for rank, hit in order + fused[len(scores) :]
    ][: options.limit]
    return outcome


def _after_rerank(hit: Hit, fused_rank: int, scores: list[float], options: Options) -> Hit:
    """The hit with the reranker's score, if it has one, and (--explain) what the rerank did."""
    score = scores[fused_rank - 1] if fused_rank <= len(scores) else None
    if hit.explain is None:
        return replace(hit, rerank_score=score)
    why: dict[str, object] = {"fused_rank": fused_rank, "score": rounded(score)}
    if score is None:
        past = fused_rank > options.rerank_top
        why["not_reranked"] = (
            f"past rerank_top ({options.rerank_top})" if past else "the reranker failed"
        )
    return replace(hit, rerank_score=score, explain={**hit.explain, "rerank": why})


def _second(store: StoreReader) -> StoreReader:
    """The store's second connection; the store itself when no second one can be opened (a
    server at its connection limit): the legs then take turns on one connection."""
    try:
        return store.beside()
    except StoreError as exc:
        log.warning("no second connection to the index (%s): the legs take turns", exc)
        return store


def _vector_leg(
    store: StoreReader,
    query: str,
    query_vector: np.ndarray,
    options: Options,
    legs: Legs,
    notices: list[str],
) -> None:
    legs.ran_vector = True
    waiting = store.pending_count()
    if waiting:
        notices.append(
            f"{waiting} chunks have no vector yet and are found by keyword only: "
            "memsync index (or a running watch) embeds them"
        )
    pool = pool_size(options.limit)
    sample = store.sample_vectors(SAMPLE_CHUNKS)
    probes = sample.probes(query_vector, fts.script(query), MIN_NOTES)
    # the mean vectors choose as many as the limit asks for (a larger first step costs 14% at
    # 100k chunks); the pool is cut from every chunk they chose
    nearest = store.vector_search(
        query_vector, options.limit * 4, options.only, probes=probes, every=True
    )
    if nearest:
        legs.query_vector = query_vector
        legs.background, legs.backdrop = sample.best_cosines(query_vector), sample.backdrop
        # the pool is cut on the cosines as ranked: a chunk of another script, moved up by
        # calibrate_by_script, must not depend on how many results were asked for
        last = nearest[min(pool, len(nearest)) - 1][1]
        reach = last + script_shift_range(legs.background, legs.backdrop)
        hits = nearest[:pool] + [(i, d) for i, d in nearest[pool:] if d <= reach]
        legs.cosines = {i: 1.0 - d for i, d in hits}


def pool_size(limit: int) -> int:
    """Candidates each leg brings: 4 per result asked for, and never fewer than -n 10 brings,
    so that the first results of `-n 2` (as an agent asks) are those of `-n 10`: a chunk beyond
    a small pool lost its keyword score (and a note the query names, its lift)."""
    return max(limit * 4, MIN_POOL)


def _keyword_leg(
    store: StoreReader, query: str, options: Options, legs: Legs, notices: list[str]
) -> None:
    """Every term first; any term when that finds fewer than asked for."""
    legs.terms = fts.query_terms(query)
    if not legs.terms:
        if options.mode == "keyword":
            notices.append("the query has no words to search for")
        return
    legs.ran_text = True
    pool = pool_size(options.limit)
    rows, legs.best_bm25 = store.keyword_search(legs.terms, False, pool, options.only)
    if len(rows) < options.limit and len(legs.terms) > 1:
        rows, legs.best_bm25 = store.keyword_search(legs.terms, True, pool, options.only)
    legs.bm25 = dict(rows)


def _keyword_legs(
    store: StoreReader,
    query: str,
    query_script: str,
    options: Options,
    legs: Legs,
    notices: list[str],
) -> None:
    """The keyword leg, then for a Chinese question the same across scripts: its glosses search
    the English chunks (in a vault without them they find nothing, at little cost), beside the
    vector leg as the keyword leg is (a long question's glosses cost as much as a leg)."""
    _keyword_leg(store, query, options, legs, notices)
    if legs.ran_text and query_script == "cjk":
        _glossed_leg(store, query, query_script, options, legs, notices)


def _sampled_scripts(store: StoreReader, legs: Legs) -> set[str]:
    """The index's scripts as the vector leg sampled them, or (no vectors) from its text."""
    return {kind for kind, _ in legs.backdrop} or store.sample_scripts(SAMPLE_CHUNKS)


def _glossed_leg(
    store: StoreReader,
    query: str,
    query_script: str,
    options: Options,
    legs: Legs,
    notices: list[str],
) -> None:
    """The keyword leg across scripts: a Chinese question's words glossed in English, an English
    question's words translated to Chinese (glossary), searched as any of them, for the chunks
    in the other script, which no word of the question could match."""
    glossary = shared_glossary(data_dir())
    if glossary is None:
        notices += filter(None, [unavailable(data_dir())])
        return
    try:
        if query_script == "cjk":
            legs.glosses = [words for _, words in segments(query, glossary)]
            terms = list(dict.fromkeys(w for words in legs.glosses for w in words))
        else:
            legs.glosses = translations(legs.terms, glossary, written_in_capitals(query))
            terms = [fts.cjk_phrase(w) for words in legs.glosses for w in words]
    except (OSError, sqlite3.Error) as exc:  # damaged again, or not rebuilt
        notices.append(f"the Chinese-English glossary failed ({exc}): words of one script only")
        legs.glosses = []
        return
    finally:
        notices += filter(None, [glossary.take_notice()])
    if terms:
        pool = pool_size(options.limit)
        rows, legs.best_gloss_bm25 = store.keyword_search(terms, True, pool, options.only)
        legs.gloss_bm25 = dict(rows)


def resolved_mode(requested: str, ran_vector: bool, ran_text: bool) -> str:
    """Pure: the mode that really ran; a keyword leg asked for counts as keyword even when the
    query had no words."""
    if ran_vector and ran_text:
        return "rrf" if requested == "rrf" else "hybrid"
    if ran_vector:
        return "vector"
    if ran_text or requested in ("hybrid", "keyword", "rrf"):
        return "keyword"
    return "none"


def _candidates(store: StoreReader, query: str, query_script: str, legs: Legs) -> list[Candidate]:
    """Every chunk a leg found, with both legs' calibrated scores and the exact-match rule."""
    idents = identifiers(query)
    others = other_terms(query, idents)
    rows = store.chunks(list(dict.fromkeys([*legs.cosines, *legs.bm25, *legs.gloss_bm25])))
    scripts = {i: fts.script(row.text) for i, row in rows.items()}
    if legs.background is not None and legs.query_vector is not None:
        # a chunk the keyword leg found beyond the vector leg's pool has vectors all the same:
        # its cosine, not 0, goes into the fusion
        for i in [*legs.bm25, *legs.gloss_bm25]:
            stored = rows[i].embedding if i in rows else None
            if i not in legs.cosines and stored:
                legs.cosines[i] = best_cosine(stored, legs.query_vector)
        ids = [i for i in legs.cosines if i in rows]
        calibrated = calibrate_by_script(
            np.array([legs.cosines[i] for i in ids]),
            [scripts[i] for i in ids],
            legs.background,
            legs.backdrop,
            query_script,
        )
        legs.vector = {i: float(s) for i, s in zip(ids, calibrated)}
    found = [i for i in legs.bm25 if i in rows]
    names = {path: named(path, legs.terms) for path in {rows[i].path for i in found}}
    text_scores = calibrate_bm25(
        {i: legs.bm25[i] for i in found},
        {i: coverage(rows[i].text, legs.terms) for i in found},
        legs.best_bm25,
        {i for i in found if names[rows[i].path]},
    )
    glossed = _glossed_scores(legs, rows, scripts, query_script, text_scores)
    text_scores.update(glossed)
    # where the question's glosses found chunks, a chunk they did not find lacks keyword
    # evidence as one in the question's own script does (`公式` among Obsidian's English help
    # pages: a chunk whose window `---` is near every short question outranked, unmatched, the
    # page on formulas that the glosses found)
    reached = {scripts[i] for i in legs.gloss_bm25 if i in rows} | {query_script}
    return [
        Candidate(
            id=row.id,
            path=row.path,
            start_line=row.start_line,
            end_line=row.end_line,
            text=row.text,
            vector_score=legs.vector.get(row.id),
            text_score=text_scores.get(row.id),
            exact=is_exact(row.text, idents, others),
            other_script=scripts[row.id] != query_script,
            out_of_reach=scripts[row.id] not in reached,
            glossed=row.id in glossed,
            bm25=legs.gloss_bm25[row.id] if row.id in glossed else legs.bm25.get(row.id),
            cosine=legs.cosines.get(row.id),
            vectors=row.embedding,
            window_lines=row.window_lines,
        )
        for row in rows.values()
    ]


def _glossed_scores(
    legs: Legs,
    rows: dict[int, ChunkRow],
    scripts: dict[int, str],
    query_script: str,
    text_scores: dict[int, float],
) -> dict[int, float]:
    """The keyword scores of the chunks in the other script that the question's words in their
    language found, where higher than their own; a translation's match is no stronger than the
    best match of the question's own words."""
    across = [i for i in legs.gloss_bm25 if i in rows and scripts[i] != query_script]
    ceiling = max(text_scores.values(), default=1.0)
    scores = calibrate_bm25(
        {i: legs.gloss_bm25[i] for i in across},
        {i: glossed_coverage(rows[i].text, legs.glosses) for i in across},
        legs.best_gloss_bm25,
    )
    capped = {i: min(score, ceiling) for i, score in scores.items()}
    return {i: score for i, score in capped.items() if score > text_scores.get(i, 0.0)}


def _hits(candidates: list[Candidate], query: str, options: Options, legs: Legs) -> list[Hit]:
    words = query_words(query)
    # a chunk in the other script shows the lines holding the question's words in its language
    glossed = sorted({w.lower() for group in legs.glosses for w in group}, key=len, reverse=True)
    across = list(dict.fromkeys([*words, *glossed]))
    idents = identifiers(query)
    others = other_terms(query, idents)
    penalties: dict[int, float] = {}
    repeats: dict[int, float] = {}
    hits = []
    for candidate, score, relevance in rank(candidates, options, penalties, repeats):
        shown = across if candidate.other_script else words
        focus = _nearest_lines(candidate, legs.query_vector)
        text, first = snippet(candidate.text, shown, candidate.start_line, focus=focus)
        why = (
            explain(candidate, score, relevance, penalties, repeats, focus)
            if options.explain
            else None
        )
        hits.append(
            Hit(
                candidate.path,
                candidate.start_line,
                candidate.end_line,
                score,
                candidate.vector_score,
                candidate.text_score,
                text,
                first,
                relevance,
                # the lines listed hold the match: the rest of an overlapping chunk may not
                candidate.exact and is_exact(candidate.text, idents, others),
                why,
                text=candidate.text,
            )
        )
    return hits


def _nearest_lines(candidate: Candidate, query_vector: np.ndarray | None) -> tuple[int, int] | None:
    """The lines of the candidate's window nearest the question (0-based in its text, the end
    excluded; a short note's whole vector, which may score it, says no lines); None without
    vectors or their lines, or where those lines are cut away (a result of its note above shows
    them: leaning on the nearest of the rest showed the evidence less often)."""
    if candidate.vectors is None or candidate.window_lines is None or query_vector is None:
        return None
    lines = read_window_lines(candidate.window_lines)
    nearest = lines[nearest_window(candidate.vectors, query_vector, len(lines))]
    return nearest if nearest[1] > nearest[0] else None  # a cut chunk's may be cut away


def _vector_unavailable(store: StoreReader, embedder: Embedder | None, unavailable: str) -> str:
    key = store.model_key()
    if key is None:
        return "the index has no vectors (indexed keyword-only)"
    if embedder is None:
        return unavailable or f"cannot load {key.provider} {key.model}"
    if embedder.key != key:
        return f"the index holds {key.provider} {key.model}, not {embedder.describe()}"
    if not store.has_vectors():
        return "no chunk has its vector yet: run memsync index"
    return ""
