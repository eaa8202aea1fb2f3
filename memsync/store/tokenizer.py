"""FTS5's own tokenizer, outside an FTS5 table: the words a backend without FTS5 indexes.

apsw hands out SQLite's tokenizers, so PostgreSQL's tsvector holds exactly the tokens, stemmed
by the same Porter stemmer, that chunks_fts holds for the same text: one text preparation
(fts.index_text, then this) for both backends, and no stemmer of our own to drift from SQLite's.
"""

from __future__ import annotations

from typing import Any

# the tokenizer chunks_fts declares (sqlite_store.MIGRATIONS): 'porter unicode61 remove_diacritics 2'
TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])
_tokenizer: Any = None


def tokens(text: str) -> list[str]:
    """The tokens FTS5 makes of `text`, in order (their offsets are the list's indexes)."""
    import apsw

    global _tokenizer
    if _tokenizer is None:
        _tokenizer = apsw.Connection(":memory:").fts5_tokenizer(*TOKENIZER)
    return list(
        _tokenizer(
            text.encode("utf-8", "replace"),
            apsw.FTS5_TOKENIZE_DOCUMENT,
            None,
            include_offsets=False,
            include_colocated=False,
        )
    )
