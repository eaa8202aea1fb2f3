"""The keyword leg's calibration and the exact-match rule, pure. Each leg is calibrated into
[0, 1] so that one `min_score` means the same for every model. Text: the best BM25 match gets
s = (-r) / (1 - r), the others s times their BM25 relative to the best, each floored at half the
share of query terms it holds (BM25 is near 0 in a small vault), and a chunk holding every term
lifted to 0.3 + 0.7 x that, one of a note whose file name holds every term (`heron`,
projects/heron.md) to 0.5 + 0.5 x that. A chunk holding every identifier of the query
(`OPS-1432`, `2222`, `pg-main-2`) verbatim, and most of its other content words, is an exact
match (ranking lifts it)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from .. import fts


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


NAMED = 0.5  # a chunk of a note one of whose names holds every term of the query: at least this


def named(path: str, terms: Sequence[str], names: Sequence[tuple[str, str]] = ()) -> str | None:
    """Which of the note's names holds every term of the query: its file name (`heron` and
    projects/heron.md, `li wei` and people/li-wei.md), else one of `names` ((kind, name): its
    title, its aliases), as "file name" or "alias: HSD"; None when none does. A note's name
    says what it is about, while its text may hold the name less often than a short note that
    mentions it twice."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    for kind, name in [("file name", stem), *names]:
        words = set(_stems(" ".join(re.findall(r"[^\W_]+", fts.cjk_spelled(name.lower())))))
        if terms and all(set(_stems(term)) <= words for term in terms):
            return kind if kind == "file name" else f"{kind}: {name}"
    return None


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
