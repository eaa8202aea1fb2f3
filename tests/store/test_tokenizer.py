"""The words a backend without FTS5 indexes are the tokens FTS5 itself makes of the same text."""

from __future__ import annotations

import apsw

from memsync.store.tokenizer import TOKENIZER, tokens


def test_tokens_are_porter_stemmed_case_folded_and_without_diacritics() -> None:
    assert tokens("Running the Café's replicas") == ["run", "the", "cafe", "s", "replica"]
    assert tokens("") == []


def test_tokens_match_what_an_fts5_table_with_that_tokenizer_matches() -> None:
    conn = apsw.Connection(":memory:")
    name, args = TOKENIZER
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{name} {' '.join(args)}')")
    text = "Rebalancing consumers naïvely, 重置 VPN 密钥 (v2.3)"
    conn.execute("INSERT INTO t VALUES (?)", (text,))
    for token in tokens(text):
        hits = conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (f'"{token}"',)).fetchall()
        assert hits == [(1,)], token
