"""Text as FTS5 sees it, pure: CJK bigrams for the index, safe MATCH expressions for user text.

FTS5's unicode61 tokenizer makes one token of a whole run of Chinese or Japanese characters, so
`端口` would never match inside `测试服务器的SSH端口是2222`. Both the indexed text and the query
spell such runs as overlapping character bigrams, which unicode61 then sees as separate tokens.
"""

from __future__ import annotations

import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
WORD = re.compile(f"[^\\W_{_CJK}]+")

# words a question is phrased with and no note is about: articles, auxiliaries, question words,
# the commonest prepositions, the verbs of asking (a dictionary sense is read without them too)
FUNCTION_WORDS = frozenset(
    """
    a an the and but or if so as then there this that these they them their it its i me my
    we our you your is are was were be been have has had do does did can could will would should
    what when where which who whom why how
    about at by for from in into of on to with not any all also just
    know tell find remember said say
    """.split()
)
# and the rest of NLTK's English list (less its contraction fragments): pronouns, quantifiers,
# degree words (not `own`: "what does Nate own" asks about owning). In a dictionary sense they
# are its meaning (`to have no choice`), so only questions lose them. Prepositions of time and
# place stay: `before`, `after`, `during` say what a note says too (dropping them lost recall).
STOPWORDS = FUNCTION_WORDS | frozenset(
    """
    myself ours ourselves yours yourself yourselves he him his himself she her hers herself
    itself theirs themselves those am being having doing because until while
    again further once here both each few more most other some such no nor only same
    than too very now
    """.split()
)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


# recorded in the index with the chunker: when the spelling below changes, every note is re-indexed
SPELLING = "cjk-bigrams+unigrams+camel-words"


_LETTER_WORD = re.compile(f"[{_CJK}]+|[^\\W\\d_]{{2,}}")


def words(text: str) -> list[str]:
    """The words of `text` as the keyword index holds them, in order, repeats kept: case-folded
    words of two letters or more, and each CJK run as its bigrams (a lone character as itself)."""
    found: list[str] = []
    for word in _LETTER_WORD.findall(text.lower()):
        found.extend(_bigrams(word) if _CJK_RUN.fullmatch(word) else [word])
    return found


def cjk_phrase(word: str) -> str:
    """A Chinese word as one FTS5 phrase: its bigrams, which the index holds side by side."""
    return " ".join(_bigrams(word))


def _cjk_tokens(run: str) -> list[str]:
    # bigrams for words of two characters or more, and each character alone for one-character queries
    return _bigrams(run) + (list(run) if len(run) > 1 else [])


# a word with a capital inside it (OOMKilled, CrashLoopBackOff, miRNA), where it may split, and
# the words camel case joins: `Killed`, `Loop` after `OOM`, `Crash` (three letters or more each)
_CAMEL = re.compile(r"\b[A-Za-z]*[a-z][A-Z][A-Za-z]*\b|\b[A-Z]{2,}[a-z][A-Za-z]*\b")
_CAMEL_SPLIT = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z]{2,})")
_FIRST_WORD, _JOINED_WORD = re.compile(r"[A-Za-z]{3,}"), re.compile(r"[A-Z][a-z]{2,}")


def _with_parts(word: re.Match[str]) -> str:
    """The word, then its parts when camel case joined words: `OOMKilled OOM Killed`, but
    `miRNA`, `HeLa`, `GTPase` or `macOS` alone (a scientific name's or a brand's capitals are
    no word boundaries, and parts of one or two letters match everything)."""
    first, *rest = _CAMEL_SPLIT.split(word.group())
    joined = bool(_FIRST_WORD.fullmatch(first)) and all(_JOINED_WORD.fullmatch(p) for p in rest)
    return " ".join([word.group(), first, *rest]) if rest and joined else word.group()


def index_text(text: str) -> str:
    """The text stored in chunks_fts: CJK runs spelled as bigrams and single characters, a
    camel-case word followed by its parts (`killed` must find `OOMKilled`; the whole word still
    matches as typed), everything else as is."""
    return cjk_spelled(_CAMEL.sub(_with_parts, text))


def cjk_spelled(text: str) -> str:
    """CJK runs spelled as bigrams and single characters, everything else as is: the words of
    lower-cased text, which has no camel case to split."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(_cjk_tokens(m.group())) + " ", text)


# "Melanie's kids" asks about Melanie: the phrase "melanie s" would need the possessive written out
_POSSESSIVE = re.compile(r"(?<=\w)['’]s?(?=[\s,.;:!?)\]]|$)", re.IGNORECASE)


def query_terms(text: str) -> list[str]:
    """User text -> FTS5 phrases; stop words dropped unless nothing else is left, and an
    English possessive ('s, s') left out.

    A whitespace-separated word stays one phrase (`OPS-1432` must match as `ops 1432`, adjacent);
    a CJK run becomes its bigrams, each a term, so a question written in Chinese can still match.
    """
    terms: list[str] = []
    for token in _POSSESSIVE.sub("", text).split():
        for part in re.split(f"([{_CJK}]+)", token):
            if _CJK_RUN.fullmatch(part):
                terms.extend(_bigrams(part))
            else:
                words = WORD.findall(part)
                if words:
                    terms.append(" ".join(words).lower())
    content = [t for t in terms if t not in STOPWORDS]
    return list(dict.fromkeys(content or terms))


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str], operator: str = "AND") -> str:
    """A MATCH string in which no user character is FTS5 syntax: every term is a quoted phrase."""
    return f" {operator} ".join(_phrase(t) for t in terms)


def bm25_score(rank: float) -> float:
    """FTS5's bm25() (lower is better, < 0) mapped into [0, 1): s = (-r) / (1 - r)."""
    strength = max(-rank, 0.0)
    return strength / (1.0 + strength)


# the writing systems a multilingual model keeps apart: each has its own spread of cosines
_SCRIPTS = [  # CJK is counted with _CJK_RUN: a second pattern of its ranges is slow to compile
    ("cyrillic", re.compile("[\u0400-\u04ff]")),
    ("greek", re.compile("[\u0370-\u03ff]")),
    ("arabic", re.compile("[\u0600-\u06ff]")),
    ("hebrew", re.compile("[\u0590-\u05ff]")),
    ("devanagari", re.compile("[\u0900-\u097f]")),
    ("thai", re.compile("[\u0e00-\u0e7f]")),
]
SCRIPT_SAMPLE = 400  # characters of a text that decide its script (all the stores' samples read)
# a note's front matter (a YAML mapping between `---` lines at its top), whose keys are English
# in a note of any language. Not metadata's pattern: a chunk's text comes without its line number
# here, and a chunk that starts at a `---` rule mid-note has no `key:` line after it
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n[\w-]+:.*?^(?:---|\.\.\.)[ \t]*$", re.S | re.M)


def script(text: str) -> str:
    """The writing system of at least a third of the text's first letters ("latin" for any
    other): a note in Chinese with `SSH` and `2222` in it is Chinese. A chunk's front matter
    counts only when nothing follows it: `aliases:`, `permalink:`, `publish: true` made the
    first chunk of a Chinese page English (Obsidian's help: 35 of its 173 Chinese pages). Only
    the first SCRIPT_SAMPLE characters are read, so a front matter longer than that decides."""
    head = text[:SCRIPT_SAMPLE]
    body = _FRONT_MATTER.sub("", head, count=1)
    head = body if body.strip() else head
    if len(head.encode("utf-8", "surrogatepass")) - len(head) < len(head) // 6:
        return "latin"  # too few characters beyond ASCII for a third of the letters
    counts = {name: len(pattern.findall(head)) for name, pattern in _SCRIPTS}
    counts["cjk"] = sum(len(run) for run in _CJK_RUN.findall(head))
    letters = sum(len(w) for w in WORD.findall(head)) + counts["cjk"]  # WORD leaves CJK out
    name, most = max(counts.items(), key=lambda item: item[1])
    return name if most and most * 3 >= letters else "latin"
