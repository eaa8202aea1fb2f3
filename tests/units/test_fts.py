from __future__ import annotations

from collections.abc import Iterator

import pytest

from memsync import fts
from memsync.store.locate import Location
from memsync.store.protocols import FileRow, NewChunk
from memsync.store.protocols import StoreWriter as Store

HOSTILE = [
    '"',
    '""',
    "'",
    "(",
    ")",
    "(a OR b",
    "NEAR(a b)",
    "a NEAR b",
    "*",
    "a*",
    "-a",
    "a -b",
    "AND",
    "OR NOT",
    "NOT a",
    "col:val",
    "text:port",
    "^a",
    "a + b",
    "🙂",
    "🙂🙂 port",
    "!!!",
    "...",
    "{}",
    "[]",
    "a:",
    ":",
    "\\",
    "%",
    "_",
    "\x00",
    "NEAR/3",
    "'; DROP TABLE chunks; --",
]


def test_bm25_mapping() -> None:
    assert fts.bm25_score(0.0) == 0.0
    assert fts.bm25_score(-1.0) == pytest.approx(0.5)
    assert fts.bm25_score(-9.0) == pytest.approx(0.9)
    assert fts.bm25_score(3.0) == 0.0


def test_query_terms_drop_stop_words_unless_nothing_is_left() -> None:
    assert fts.query_terms("What is the SSH port of the test server?") == [
        "ssh",
        "port",
        "test",
        "server",
    ]
    assert fts.query_terms("to be or not to be") == ["to", "be", "or", "not"]
    assert fts.query_terms("OPS-1432") == ["ops 1432"]


def test_a_question_s_pronouns_and_degree_words_go_its_time_words_stay() -> None:
    # `too much` ranked a violin note's "too much rosin" above the note about OOMKilled pods
    assert fts.query_terms("a container was killed for using too much RAM, what now") == [
        "container",
        "killed",
        "using",
        "much",
        "ram",
    ]
    assert fts.query_terms("What did she do before her trip and after it?") == [
        "before",
        "trip",
        "after",
    ]


def test_cjk_runs_become_bigrams_in_index_and_query() -> None:
    tokens = fts.index_text("测试服务器的SSH端口是2222").split()
    assert tokens[:5] == ["测试", "试服", "服务", "务器", "器的"]
    assert set("测试服务器的") <= set(tokens) and "SSH" in tokens and "2222" in tokens
    assert {"端口", "口是", "端", "口", "是"} <= set(tokens)
    assert fts.query_terms("端口") == ["端口"]
    assert fts.query_terms("ポート番号") == ["ポー", "ート", "ト番", "番号"]


@pytest.fixture
def store(location: Location) -> Iterator[Store]:
    s = location.open(create=True)
    texts = {
        "zh.md": "测试服务器的SSH端口是2222",
        "ja.md": "サーバーのポート番号は8080です",
        "en.md": "The staging Redis runs on port 6380. Ticket OPS-1432 tracks the lag.",
        "stem.md": "We were running replications all night",
        "chat.md": "- **Melanie:** I took the kids to the museum yesterday.",
        "k8s.md": "Exit code 137: OOMKilled. Then CrashLoopBackOff.",
    }
    for path, text in texts.items():
        s.replace_file(
            FileRow(path, path, 1, 1), [NewChunk(1, 1, path, text, "", fts.index_text(text))]
        )
    yield s
    s.close()


def _paths(store: Store, query: str, op: str = "AND") -> set[str]:
    terms = fts.query_terms(query)
    if not terms:
        return set()
    ids = [i for i, _ in store.keyword_search(terms, op == "OR", 10)[0]]
    return {c.path for c in store.chunks(ids).values()}


def test_two_character_chinese_and_japanese_words_match_inside_runs(store: Store) -> None:
    assert _paths(store, "端口") == {"zh.md"}
    assert _paths(store, "服务器") == {"zh.md"}
    assert _paths(store, "番号") == {"ja.md"}
    assert _paths(store, "SSH端口") == {"zh.md"}
    assert _paths(store, "端") == {"zh.md"}  # one character inside a longer run
    assert _paths(store, "番") == {"ja.md"}


def test_possessives_match_the_name_alone() -> None:
    assert fts.query_terms("What do Melanie's kids like?") == ["melanie", "kids", "like"]
    assert fts.query_terms("Caroline’s identity, the dogs' names") == [
        "caroline",
        "identity",
        "dogs",
        "names",
    ]
    assert fts.query_terms("don't stop") == ["don t", "stop"]  # not a possessive


def test_a_possessive_question_finds_the_turns_its_person_speaks(store: Store) -> None:
    # "melanie s" as a phrase would need "Melanie's" written out in the note
    assert _paths(store, "Melanie's kids") == {"chat.md"}


def test_identifiers_and_stems_match(store: Store) -> None:
    assert _paths(store, "OPS-1432") == {"en.md"}
    assert _paths(store, "6380") == {"en.md"}
    assert _paths(store, "replication run") == {"stem.md"}


def test_camel_case_words_are_indexed_whole_and_by_their_parts() -> None:
    assert fts.index_text("OOMKilled, CrashLoopBackOff").split() == [
        "OOMKilled", "OOM", "Killed,", "CrashLoopBackOff", "Crash", "Loop", "Back", "Off",
    ]  # fmt: skip
    # a plural acronym, a scientific name, a brand: no words joined, no parts
    assert fts.index_text("RFCs miRNA HeLa GTPase macOS") == "RFCs miRNA HeLa GTPase macOS"


def test_a_word_inside_a_camel_case_identifier_matches(store: Store) -> None:
    assert _paths(store, "container killed") == set()  # every term, and "container" is nowhere
    assert _paths(store, "killed") == {"k8s.md"}
    assert _paths(store, "crash loop") == {"k8s.md"}
    assert _paths(store, "OOMKilled") == {"k8s.md"}  # the whole word too


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_queries_never_reach_match_unescaped(store: Store, query: str) -> None:
    for op in ("AND", "OR"):
        _paths(store, query, op)  # must not raise


FAQ = "本页列出了关于 Obsidian Sync 常见问题的解答。"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("测试服务器的SSH端口是2222。", "cjk"),  # a Chinese note that holds ASCII words
        ("# 周末计划\n\n- 周六去吃拉面", "cjk"),
        ("The test server's SSH port is 2222.", "latin"),
        ("ssh port 2222, 测试", "latin"),  # a few Chinese characters in English text
        ("Привет, как дела?", "cyrillic"),
        ("Tomás's café in Porto", "latin"),
        ("", "latin"),
        # front matter's keys are English in a note of any language: its text decides
        (f"---\naliases:\n  - Frequently asked questions\npermalink: sync/faq\n---\n{FAQ}", "cjk"),
        ("---\ntitle: 同步\npublish: true\n---\n", "latin"),  # nothing else: as it is
        ("---\n\nThe rule above is no front matter.\n---\n常见问题", "latin"),
    ],
)
def test_the_script_of_a_text_is_that_of_a_third_of_its_letters(text: str, expected: str) -> None:
    assert fts.script(text) == expected
