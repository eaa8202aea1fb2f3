"""The keyword side of a PgStore vault: the counters FTS5's bm25 reads (the vault's row and
token totals, each word's chunk count), kept by every write of chunks, and a query ranked by
pg_bm25 over them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..filters import NoteFilter
from .pg_bm25 import Bm25, phrases_of, top_any, tsquery
from .pg_connect import psycopg_sql, scalar
from .sql_reading import Ranking, SharedReading


class PgKeywords(SharedReading):
    """BM25's counters and its ranking, over the shared tables' hooks."""

    def _count_tokens(self, cursor: Any, chunks: int, tokens: int, words: Counter[str]) -> None:
        """Written chunks' share of the token totals and the words' chunk counts, added once
        per batch: one update of each counter row, not one a chunk."""
        cursor.execute(
            "UPDATE fts_totals SET rows = rows + %s, tokens = tokens + %s", (chunks, tokens)
        )
        cursor.execute(
            "INSERT INTO lexemes(lexeme, chunks) SELECT * FROM unnest(%s::text[], %s::int[]) "
            "ON CONFLICT(lexeme) DO UPDATE SET chunks = lexemes.chunks + excluded.chunks",
            (list(words), list(words.values())),
        )

    def _delete_chunks(self, paths: Sequence[str]) -> None:
        """Notes' chunks, and their share of the token totals and the lexemes' chunk counts."""
        self.conn.execute(
            "WITH gone AS (DELETE FROM chunks WHERE path = ANY(%s) RETURNING fts, fts_len), "
            "totals AS (UPDATE fts_totals SET rows = rows - (SELECT count(*) FROM gone), "
            "tokens = tokens - (SELECT coalesce(sum(fts_len), 0) FROM gone)) "
            "UPDATE lexemes SET chunks = lexemes.chunks - g.n FROM (SELECT lexeme, count(*) AS n "
            "FROM gone, unnest(tsvector_to_array(gone.fts)) AS lexeme GROUP BY lexeme) g "
            "WHERE lexemes.lexeme = g.lexeme",
            (list(paths),),
        )

    def _keyword_ranking(self, terms: Sequence[str], any_term: bool) -> Ranking:
        """FTS5's bm25, in SQL (pg_bm25): an AND query scored at once; an OR query pruned as
        MaxScore does, so that chunks holding only common words are never scored."""
        words = phrases_of(terms)
        if not words:
            return lambda only, limit: []
        rows, tokens = self.conn.execute("SELECT rows, tokens FROM fts_totals").fetchone()
        hits = self._hits(words)
        bm25 = Bm25.of(words, hits, rows, tokens)

        def ranked(only: NoteFilter, limit: int) -> list[tuple[int, float]]:
            allowed, allowed_args = self._allowed(only)

            def scored(match: str, k: int) -> list[tuple[int, float]]:
                sql, args = bm25.select(match, psycopg_sql(allowed), allowed_args)
                return [(int(i), float(r)) for i, r in self.conn.execute(sql, (*args, k))]

            return top_any(bm25, hits, limit, scored) if any_term else scored(bm25.all_of(), limit)

        return ranked

    def _token_chunks(self, tokens: Sequence[str]) -> dict[str, int]:
        """From the lexemes' chunk counts, which every write keeps."""
        found = self.conn.execute(
            "SELECT lexeme, chunks FROM lexemes WHERE lexeme = ANY(%s) AND chunks > 0",
            (list(tokens),),
        )
        return {str(word): int(count) for word, count in found.fetchall()}

    def _hits(self, phrases: list[list[str]]) -> list[int]:
        """How many chunks hold each phrase: a word's count is kept up to date by every write; a
        phrase of several words is counted (its rarest word keeps that cheap)."""
        words = [p[0] for p in phrases if len(p) == 1]
        counted = dict(
            self.conn.execute(
                "SELECT lexeme, chunks FROM lexemes WHERE lexeme = ANY(%s)", (words,)
            ).fetchall()
        )
        return [
            counted.get(p[0], 0)
            if len(p) == 1
            else scalar(
                self.conn.execute(
                    "SELECT count(*) FROM chunks WHERE fts @@ %s::tsquery", (tsquery(p),)
                )
            )
            for p in phrases
        ]
