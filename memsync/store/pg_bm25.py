"""PostgreSQL's keyword leg, pure: FTS5's BM25 over a tsvector. Index texts become tsvector
literals of the very tokens SQLite's FTS5 makes (positions kept), query terms quoted phrases
(no user character is ever tsquery syntax), each phrase gets FTS5's idf, the score is built as
SQL, and an OR query is planned as MaxScore does over a scorer function."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .tokenizer import tokens

K1, B = 1.2, 0.75  # FTS5's bm25 constants
ZETA2 = 1.6449340668482264  # pi^2 / 6: what ts_rank divides a word's sum of 1/j^2 by
MAX_LEXEME_BYTES = 2000  # tsvector refuses a lexeme of 2 KB or more; a longer token is cut
MAX_POSITIONS = 256  # tsvector keeps 256 positions per lexeme, each at most 16383
MAX_POSITION = 16383

# (tsquery, k) -> the best k (chunk id, rank) matching it: the store runs Bm25.select
Scorer = Callable[[str, int], list[tuple[int, float]]]


def lexeme(token: str) -> str:
    data = token.encode("utf-8")
    if len(data) > MAX_LEXEME_BYTES:
        token = data[:MAX_LEXEME_BYTES].decode("utf-8", "ignore")
    return token


def quoted(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_of(text: str) -> tuple[str, int, list[str]]:
    """(tsvector literal, token count, distinct lexemes) of an index text: FTS5's tokens with
    their positions."""
    positions: dict[str, list[int]] = {}
    words = tokens(text)
    for offset, token in enumerate(words):
        where = positions.setdefault(lexeme(token), [])
        if len(where) < MAX_POSITIONS:
            where.append(min(offset + 1, MAX_POSITION))
    literal = " ".join(
        f"{quoted(lex)}:{','.join(map(str, sorted(set(pos))))}" for lex, pos in positions.items()
    )
    return literal, len(words), list(positions)


def phrases_of(terms: Sequence[str]) -> list[list[str]]:
    """Each query term as FTS5 reads a quoted phrase: its tokens, in order."""
    found = [[lexeme(t) for t in tokens(term)] for term in terms]
    return [p for p in found if p]


def tsquery(phrase: list[str]) -> str:
    return "(" + " <-> ".join(quoted(lex) for lex in phrase) + ")"


def idf(rows: int, hits: int) -> float:
    """FTS5's idf; a phrase in most chunks still counts a little, as in FTS5."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0 else 1e-6


@dataclass(frozen=True)
class Bm25:
    """What ranks a query's matches: its phrases as tsqueries, their idfs, the average length."""

    phrases: list[str]
    idfs: list[float]
    average_length: float

    @classmethod
    def of(cls, words: list[list[str]], hits: Sequence[int], rows: int, tokens: int) -> Bm25:
        """From the phrases, how many chunks hold each, and the vault's row and token totals."""
        return cls(
            [tsquery(p) for p in words],
            [idf(rows, h) for h in hits],
            tokens / rows if rows else 1.0,
        )

    def ceiling(self, i: int) -> float:
        """The most phrase i can add to a chunk's score, whatever its frequency."""
        return self.idfs[i] * (K1 + 1)

    def all_of(self) -> str:
        return " & ".join(self.phrases)

    def any_of(self, indexes: Sequence[int]) -> str:
        return " | ".join(self.phrases[i] for i in indexes)

    def select(self, match: str, allowed: str, args: Sequence[Any]) -> tuple[str, list[Any]]:
        """The SELECT of (id, rank) of the chunks matching `match` that pass `allowed`, best
        first; its parameters, but for the LIMIT's, which comes last. The length norm is the
        chunk's token count against the average; for a phrase's frequency in a chunk see
        frequency."""
        numbers = range(1, len(self.phrases) + 1)
        tfs = ", ".join(f"{frequency(phrase)} AS tf{i}" for i, phrase in zip(numbers, self.phrases))
        score = " + ".join(
            f"{weight!r} * tf{i} * {K1 + 1} / (tf{i} + norm)"
            for i, weight in zip(numbers, self.idfs)
        )
        sql = (
            f"SELECT id, -({score}) AS rank FROM (SELECT id, {tfs}, "
            f"{K1} * ({1 - B} + {B} * fts_len / %s) AS norm FROM chunks "
            f"WHERE fts @@ %s::tsquery AND {allowed} OFFSET 0) scored ORDER BY rank, id LIMIT %s"
        )
        return sql, [*self.phrases, self.average_length, match, *args]


def frequency(phrase: str) -> str:
    """SQL of how often the phrase (its tsquery the next parameter) occurs in a chunk's `fts`.
    A phrase of several words: ts_rank_cd with unit weights and no normalisation, one cover per
    occurrence, each worth 1. One word, by far the most common: ts_rank gives sum(1/j^2) for
    j = 1..tf over pi^2/6, read back as tf by the inverse of that sum (x = pi^2/6 - sum is
    close to 1/(tf + 1/2)), exact for every tf a tsvector can hold (1 to 256, tested), and
    much cheaper: ts_rank_cd sorts the chunk's matching positions to find covers."""
    if " <-> " in phrase:
        return "ts_rank_cd('{1,1,1,1}', fts, %s::tsquery, 0)"
    return f"round(1.0 / ({ZETA2!r} * (1 - ts_rank('{{1,1,1,1}}', fts, %s::tsquery, 0))) - 0.5)"


def top_any(bm25: Bm25, hits: Sequence[int], limit: int, scored: Scorer) -> list[tuple[int, float]]:
    """The exact top `limit` of an OR query, scoring as few chunks as MaxScore allows: score the
    chunks holding the rarest phrases first; the k-th score found is a floor that only a chunk
    holding some phrase whose ceilings do not sum below it can pass (most chunks hold some common
    word of a long question, and are never scored)."""
    order = sorted(range(len(bm25.phrases)), key=lambda i: -bm25.ceiling(i))
    scanned = 0
    while True:  # enough of the rarest phrases that their chunks may fill the top k
        scanned += 1
        if sum(hits[i] for i in order[:scanned]) >= limit or scanned == len(order):
            break
    while True:
        found = scored(bm25.any_of(order[:scanned]), limit)
        if scanned == len(order):
            return found
        floor = -found[-1][1] if len(found) == limit else 0.0
        rest = sum(bm25.ceiling(i) for i in order[scanned:])
        if rest < floor:  # a chunk with none of the scanned phrases cannot reach the top k
            return found
        needed = scanned
        while needed < len(order) and sum(bm25.ceiling(i) for i in order[needed:]) >= floor:
            needed += 1
        scanned = max(needed, scanned + 1)
