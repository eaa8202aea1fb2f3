"""pg_bm25: the tsvector text and the MaxScore plan of an OR query, against a scorer function."""

from __future__ import annotations

import random

import psycopg

from memsync.store.pg_bm25 import (
    K1,
    Bm25,
    frequency,
    idf,
    phrases_of,
    top_any,
    tsquery,
    tsvector_of,
)


def test_tsvectors_keep_fts5_s_tokens_and_positions_and_quote_everything() -> None:
    literal, count, distinct = tsvector_of("Port 6380, port o'clock")  # o, clock: 2 tokens
    assert count == 5 and set(distinct) == {"port", "6380", "o", "clock"}
    assert "'port':1,3" in literal and "'6380':2" in literal
    assert tsquery(["it's", "a"]) == "('it''s' <-> 'a')"
    assert phrases_of(["Staging Redis", "!!"]) == [["stage", "redi"]]


def test_an_or_query_finds_the_exact_top_k_while_scoring_fewer_chunks() -> None:
    rng = random.Random(7)
    rows = 2000
    # phrase 0 is in nearly every chunk, 1 in many, 2-4 rare
    share = [0.9, 0.3, 0.01, 0.02, 0.005]
    chunks = {
        cid: {i: rng.randint(1, 3) for i, p in enumerate(share) if rng.random() < p}
        for cid in range(rows)
    }
    hits = [sum(1 for c in chunks.values() if i in c) for i in range(len(share))]
    bm25 = Bm25([f"(p{i})" for i in range(len(share))], [idf(rows, h) for h in hits], 20.0)
    norms = {cid: K1 * rng.uniform(0.5, 1.5) for cid in chunks}

    def score(cid: int) -> float:
        return sum(
            bm25.idfs[i] * tf * (K1 + 1) / (tf + norms[cid]) for i, tf in chunks[cid].items()
        )

    scored_rows: list[int] = []

    def scored(match: str, k: int) -> list[tuple[int, float]]:
        wanted = {int(p.strip("()p")) for p in match.split(" | ")}
        matching = [cid for cid, c in chunks.items() if wanted & set(c)]
        scored_rows.append(len(matching))
        ranked = sorted(((cid, -score(cid)) for cid in matching), key=lambda r: (r[1], r[0]))
        return ranked[:k]

    for limit in (1, 5, 20):
        scored_rows.clear()
        brute = sorted(
            ((cid, -score(cid)) for cid in chunks if chunks[cid]), key=lambda r: (r[1], r[0])
        )
        assert top_any(bm25, hits, limit, scored) == brute[:limit]
        assert sum(scored_rows) < sum(1 for c in chunks.values() if c)  # pruned: not all scored


def test_a_phrase_s_frequency_is_exact_for_every_count_a_tsvector_holds(pg_url: str) -> None:
    """A word's count is read back from ts_rank's sum of 1/j^2 (the real server computes it);
    a phrase of several words counts its covers; the two agree with ts_rank_cd."""
    word, pair = frequency(tsquery(["port"])), frequency(tsquery(["port", "6380"]))
    assert "ts_rank(" in word and "ts_rank_cd(" in pair
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for count in range(257):  # tsvector keeps at most 256 positions of a word
            text = " ".join(["port 6380"] * count + ["other"])
            literal, _, _ = tsvector_of(text)
            got = conn.execute(
                f"SELECT {word}, {pair} FROM (SELECT %s::tsvector AS fts) AS chunk",
                (tsquery(["port"]), tsquery(["port", "6380"]), literal),
            ).fetchone()
            assert got == (count, count), count
