"""Hybrid retrieval as named steps: the query read once (query.Query); the legs run, each
returning a frozen value with its notices (the keyword leg, the same across scripts through the
glossary, and the vector leg of vector_side, loaded only when it runs); the mode that really
ran; the candidates gathered and ranked (ranking, pure); the hits with the lines they show
(snippets). The reranker, when one is given, orders the first of them."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import fts
from ..config import data_dir
from ..embedders import Embedder
from ..errors import EmbeddingError, StoreError
from ..store.lock import embedding_now
from ..store.protocols import ChunkRow, StoreReader
from .calibration import calibrate_bm25, coverage, glossed_coverage, is_exact, named
from .glossary import segments, shared_glossary, translations, unavailable, written_in_capitals
from .options import SAMPLE_CHUNKS, Options, pool_size
from .query import Query
from .ranking import Candidate, rank
from .snippets import explain, nearest_lines, rounded, snippet

if TYPE_CHECKING:
    from ..embedders import Reranker
    from .vector_side import VectorLeg

log = logging.getLogger("memsync.search")


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


@dataclass(frozen=True)
class Answer:
    """A search's answer: the hits, the mode that really ran and what the user should know
    (why a leg did not run, what the index lacks). Its JSON form is shapes.SearchResult."""

    query: str
    mode: str  # what really ran
    requested_mode: str
    results: list[Hit] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    # the query's words as the keyword leg reads them (Chinese as bigrams), longest first: what
    # a face marks in the snippets, so no client keeps a tokenizer of its own
    terms: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "query": self.query,
            "mode": self.mode,
            "requested_mode": self.requested_mode,
            "notices": self.notices,
            "terms": list(self.terms),
            "results": [hit.as_dict() for hit in self.results],
        }


@dataclass(frozen=True)
class KeywordLeg:
    """What a keyword leg found: the question's own words, or the same across scripts (its
    words glossed in the other language)."""

    ran: bool = False  # it searched: the query has words to search for
    bm25: Mapping[int, float] = field(default_factory=dict)  # chunk id -> FTS5 rank, best first
    best: float | None = None  # the whole index's best rank: the calibration's anchor
    notices: tuple[str, ...] = ()
    # across scripts: each of the question's words in the other language (its translations)
    glosses: tuple[tuple[str, ...], ...] = ()


NOT_RUN = KeywordLeg()
KEYWORD_ONLY = "the index has no vectors (indexed without an embedding model)"


# -- the steps -----------------------------------------------------------------------------------


def search(
    store: StoreReader,
    query: str,
    options: Options,
    embedder: Embedder | None,
    unavailable: str = "",
    reranker: Reranker | None = None,
) -> Answer:
    """Run the legs the mode asks for, say which really ran and why a leg did not, rank, and
    let the reranker (when one is given) order the top candidates."""
    answer = ranked(store, query, options, embedder, unavailable, reranker is not None)
    return answer if reranker is None else reranked(answer, options, reranker)


def ranked(
    store: StoreReader,
    text: str,
    options: Options,
    embedder: Embedder | None,
    unavailable: str = "",
    to_rerank: bool = False,
    writer: Callable[[], str | None] = lambda: None,
) -> Answer:
    """search() without the rerank, all its work on the store; `to_rerank`: the results are
    the candidates `reranked` orders and cuts to the limit, at least `rerank_top` of them;
    `writer`: the command writing the index now (asked only when chunks wait for vectors)."""
    query = Query.of(text)
    asked = options.mode in ("hybrid", "vector", "rrf")
    why_not = _vector_unavailable(store, embedder, unavailable) if asked else ""
    runs = asked and not why_not
    keyword, glossed, vector = _legs(store, query, options, embedder if runs else None)
    if keyword.ran and query.script == "latin" and "cjk" in _sampled_scripts(store, vector):
        glossed = _glossed_leg(store, query, options)  # the vault holds Chinese
    mode = resolved_mode(options.mode, vector is not None and vector.ran, keyword.ran)
    candidates = _candidates(store, query, keyword, glossed, vector)
    limit = max(options.limit, options.rerank_top) if to_rerank else options.limit
    hits = _hits(candidates, query, replace(options, mode=mode, limit=limit), glossed)
    # an index made without a model is the user's choice, which `status` states: a search in
    # the default mode quietly searches by keyword, one asking for vectors only is told why not
    chosen = why_not == KEYWORD_ONLY and options.mode != "vector"
    unavailable_leg = [f"vector search unavailable: {why_not}"] if why_not and not chosen else []
    waiting = [waiting_notice(vector.waiting, writer())] if vector and vector.waiting else []
    legs_say = [*waiting, *(vector.notices if vector else ()), *keyword.notices, *glossed.notices]
    return Answer(text, mode, options.mode, hits, unavailable_leg + legs_say, query.words)


def waiting_notice(waiting: int, writer: str | None) -> str:
    """Chunks with no vector yet, and who embeds them: the command writing the index now where
    it is one that embeds, else how to."""
    who = embedding_now(writer) or "memsync index (or a running watch) embeds them"
    return f"{waiting} chunks have no vector yet and are found by keyword only: {who}"


def reranked(answer: Answer, options: Options, reranker: Reranker) -> Answer:
    """`ranked`'s answer with its first `rerank_top` results in the reranker's order (the
    whole lines each cites are what it reads) and the rest after them in fused order, cut to
    the limit; all in fused order, with a notice, when it fails or does not answer within the
    query's time."""
    read = answer.results[: options.rerank_top]
    notices = list(answer.notices)
    try:
        scores = reranker.scores(answer.query, [h.text for h in read]) if read else []
    except EmbeddingError as exc:
        notices.append(f"results not reranked: {exc}")
        scores = []
    fused = list(enumerate(answer.results, start=1))
    order = sorted(fused[: len(scores)], key=lambda pair: -scores[pair[0] - 1])
    results = [
        _after_rerank(hit, rank, scores, options) for rank, hit in order + fused[len(scores) :]
    ][: options.limit]
    return replace(answer, results=results, notices=notices)


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
        return store.second_connection()
    except StoreError as exc:
        log.warning("no second connection to the index (%s): the legs take turns", exc)
        return store


def _legs(
    store: StoreReader, query: Query, options: Options, embedder: Embedder | None
) -> tuple[KeywordLeg, KeywordLeg, VectorLeg | None]:
    """The keyword legs the mode asks for and, with an embedder, the vector leg: the keyword
    legs on a second connection (opened there) while this one embeds the query and searches the
    vectors (SQLite, psycopg, the model and numpy release the GIL)."""
    words = options.mode in ("hybrid", "keyword", "rrf")
    if embedder is None:
        return (*(_keyword_legs(store, query, options) if words else (NOT_RUN, NOT_RUN)), None)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsync-query") as alongside:
        keyword = alongside.submit(_keyword_legs, _second(store), query, options) if words else None
        vector = _vector_leg(store, query, options, embedder)
        found = keyword.result() if keyword is not None else (NOT_RUN, NOT_RUN)
    return (*found, vector)


def _vector_leg(
    store: StoreReader, query: Query, options: Options, embedder: Embedder
) -> VectorLeg:
    """The one place a search loads the vector side (numpy, the vectors' code): a keyword
    query never does."""
    from .vector_side import vector_leg

    return vector_leg(store, query, options, embedder)


def _keyword_leg(store: StoreReader, query: Query, options: Options) -> KeywordLeg:
    """Every term first; any term when that finds fewer than asked for."""
    terms = list(query.terms)
    if not terms:
        lacking = ("the query has no words to search for",) if options.mode == "keyword" else ()
        return KeywordLeg(notices=lacking)
    pool = pool_size(options.limit)
    rows, best = store.keyword_search(terms, False, pool, options.only)
    if len(rows) < options.limit and len(terms) > 1:
        rows, best = store.keyword_search(terms, True, pool, options.only)
    return KeywordLeg(True, dict(rows), best)


def _keyword_legs(
    store: StoreReader, query: Query, options: Options
) -> tuple[KeywordLeg, KeywordLeg]:
    """The keyword leg, then for a Chinese question the same across scripts: its glosses search
    the English chunks (in a vault without them they find nothing, at little cost), beside the
    vector leg as the keyword leg is (a long question's glosses cost as much as a leg)."""
    keyword = _keyword_leg(store, query, options)
    if keyword.ran and query.script == "cjk":
        return keyword, _glossed_leg(store, query, options)
    return keyword, NOT_RUN


def _sampled_scripts(store: StoreReader, vector: VectorLeg | None) -> set[str]:
    """The index's scripts as the vector leg sampled them, or (no vectors) from its text."""
    sampled = {kind for kind, _ in vector.sampled_from} if vector is not None else set()
    return sampled or store.sample_scripts(SAMPLE_CHUNKS)


def _glossed_leg(store: StoreReader, query: Query, options: Options) -> KeywordLeg:
    """The keyword leg across scripts: a Chinese question's words glossed in English, an English
    question's words translated to Chinese (glossary), searched as any of them, for the chunks
    in the other script, which no word of the question could match."""
    glossary = shared_glossary(data_dir())
    if glossary is None:
        return KeywordLeg(notices=tuple(filter(None, [unavailable(data_dir())])))
    failed = ""
    try:
        if query.script == "cjk":
            glosses = [words for _, words in segments(query.text, glossary)]
            terms = list(dict.fromkeys(w for words in glosses for w in words))
        else:
            glosses = translations(query.terms, glossary, written_in_capitals(query.text))
            terms = [fts.cjk_phrase(w) for words in glosses for w in words]
    except (OSError, sqlite3.Error) as exc:  # damaged again, or not rebuilt
        failed = f"the Chinese-English glossary failed ({exc}): words of one script only"
    finally:
        notices = tuple(filter(None, [failed, glossary.take_notice()]))
    if failed or not terms:
        return KeywordLeg(notices=notices, glosses=() if failed else _frozen(glosses))
    rows, best = store.keyword_search(terms, True, pool_size(options.limit), options.only)
    return KeywordLeg(True, dict(rows), best, notices, _frozen(glosses))


def _frozen(glosses: Sequence[Sequence[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(words) for words in glosses)


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


def _candidates(
    store: StoreReader,
    query: Query,
    keyword: KeywordLeg,
    glossed: KeywordLeg,
    vector_leg: VectorLeg | None,
) -> list[Candidate]:
    """Every chunk a leg found, with both legs' calibrated scores and the exact-match rule."""
    by_vector = vector_leg.cosines if vector_leg is not None else {}
    by_keyword = [*keyword.bm25, *glossed.bm25]
    rows = store.chunks(list(dict.fromkeys([*by_vector, *by_keyword])))
    vector = vector_leg.scored(rows, by_keyword, query.script) if vector_leg else None
    found = [i for i in keyword.bm25 if i in rows]
    paths = sorted({rows[i].path for i in found})
    known = store.note_names(paths) if query.terms else {}
    names = {path: named(path, query.terms, known.get(path, ())) for path in paths}
    text_scores = calibrate_bm25(
        {i: keyword.bm25[i] for i in found},
        {i: coverage(rows[i].text, query.terms) for i in found},
        keyword.best,
        {i for i in found if names[rows[i].path]},
    )
    across = _glossed_scores(glossed, rows, query.script, text_scores)
    text_scores.update(across)
    # where the question's glosses found chunks, a chunk they did not find lacks keyword
    # evidence as one in the question's own script does (`公式` among Obsidian's English help
    # pages: a chunk whose window `---` is near every short question outranked, unmatched, the
    # page on formulas that the glosses found)
    reached = {rows[i].script for i in glossed.bm25 if i in rows} | {query.script}
    return [
        Candidate(
            id=row.id,
            path=row.path,
            start_line=row.start_line,
            end_line=row.end_line,
            text=row.text,
            vector_score=vector.calibrated.get(row.id) if vector else None,
            text_score=text_scores.get(row.id),
            exact=is_exact(row.text, query.identifiers, query.others),
            other_script=row.script != query.script,
            out_of_reach=row.script not in reached,
            glossed=row.id in across,
            bm25=glossed.bm25[row.id] if row.id in across else keyword.bm25.get(row.id),
            cosine=vector.cosines.get(row.id) if vector else None,
            window_cosines=vector.windows.get(row.id) if vector else None,
            window_lines=row.window_lines,
            named_by=names.get(row.path) if row.id in keyword.bm25 else None,
            waiting=vector_leg is not None and vector_leg.ran and row.embedding is None,
        )
        for row in rows.values()
    ]


def _glossed_scores(
    glossed: KeywordLeg,
    rows: Mapping[int, ChunkRow],
    query_script: str,
    text_scores: dict[int, float],
) -> dict[int, float]:
    """The keyword scores of the chunks in the other script that the question's words in their
    language found, where higher than their own; a translation's match is no stronger than the
    best match of the question's own words."""
    across = [i for i in glossed.bm25 if i in rows and rows[i].script != query_script]
    ceiling = max(text_scores.values(), default=1.0)
    scores = calibrate_bm25(
        {i: glossed.bm25[i] for i in across},
        {i: glossed_coverage(rows[i].text, glossed.glosses) for i in across},
        glossed.best,
    )
    capped = {i: min(score, ceiling) for i, score in scores.items()}
    return {i: score for i, score in capped.items() if score > text_scores.get(i, 0.0)}


def _hits(
    candidates: list[Candidate], query: Query, options: Options, glossed: KeywordLeg
) -> list[Hit]:
    words = list(query.words)
    # a chunk in the other script shows the lines holding the question's words in its language
    glosses = sorted({w.lower() for group in glossed.glosses for w in group}, key=len, reverse=True)
    across = list(dict.fromkeys([*words, *glosses]))
    penalties: dict[int, float] = {}
    repeats: dict[int, float] = {}
    hits = []
    for candidate, score, relevance in rank(candidates, options, penalties, repeats):
        shown = across if candidate.other_script else words
        focus = nearest_lines(candidate)
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
                candidate.exact and is_exact(candidate.text, query.identifiers, query.others),
                why,
                text=candidate.text,
            )
        )
    return hits


def _vector_unavailable(store: StoreReader, embedder: Embedder | None, unavailable: str) -> str:
    """Why the vector leg cannot run ("" when it can)."""
    key = store.model_key()
    if key is None:
        return KEYWORD_ONLY
    if embedder is None:
        return unavailable or f"cannot load {key.provider} {key.model}"
    if embedder.key != key:
        return f"the index holds {key.provider} {key.model}, not {embedder.describe()}"
    if not store.has_vectors():
        return "no chunk has its vector yet: run memsync index"
    return ""
