"""A query as every step reads it, made once: its text, script, terms, identifiers, other
content words and the words snippets look for. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .. import fts

_IDENTIFIER = re.compile(r"\S*\d\S*|\S+[-_./:#]\S+")


@dataclass(frozen=True)
class Query:
    text: str
    script: str  # fts.script: the writing system the question is in
    terms: tuple[str, ...]  # fts.query_terms: what the keyword leg searches for
    identifiers: tuple[str, ...]  # what must appear verbatim for an exact match
    others: tuple[str, ...]  # the other content words an exact match holds most of
    words: tuple[str, ...]  # the words of the terms, longest first: what snippets look for

    @classmethod
    def of(cls, text: str) -> Query:
        terms = fts.query_terms(text)
        idents = identifiers(text)
        return cls(
            text,
            fts.script(text),
            tuple(terms),
            tuple(idents),
            tuple(other_terms(text, idents)),
            tuple(_words(terms)),
        )


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


def query_words(query: str) -> list[str]:
    """The words of the query's terms, longest first (for snippets and highlighting)."""
    return _words(fts.query_terms(query))


def _words(terms: Sequence[str]) -> list[str]:
    # alphabetical among words of one length: the same answer every run (a set's order is not)
    return sorted({w for t in terms for w in t.split()}, key=lambda word: (-len(word), word))
