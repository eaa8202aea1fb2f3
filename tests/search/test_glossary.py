from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memsync.search import glossary
from memsync.search.glossary import (
    Glossary,
    build,
    cached_path,
    open_glossary,
    segments,
    sense_word,
    senses,
    translations,
    written_in_capitals,
)
from tests.conftest import VaultIndexer

LINES = [
    "# CC-CEDICT\n",
    "延遲 延迟 [yan2 chi2] /to delay/to postpone/(computing) to lag/\n",
    "棚子 棚子 [peng2 zi5] /shack/shed/CL:間|间[jian1]/\n",
    "的 的 [de5] /of; ~'s (possessive particle)/\n",
    "的 的 [di4] /(bound form) bull's-eye; target/\n",
    "昰 是 [shi4] /variant of 是[shi4]/\n",
    "警 警 [jing3] /to alert/to warn/police/\n",
    "not an entry\n",
]


def test_a_sense_is_one_english_word_a_short_phrase_or_none() -> None:
    assert sense_word("(computing) to lag") == "lag"
    assert sense_word("frequently asked questions") == "frequently asked questions"
    assert sense_word("to take a bath") == ""  # `take bath`: no note spells it so
    assert sense_word("cup of tea") == ""  # no question's words hold `of`
    assert sense_word("to keep putting sth off") == ""
    assert sense_word("to sell at reduced prices") == ""  # longer than a phrase
    assert sense_word("bull's-eye") == ""
    assert sense_word("CL:間|间[jian1]") == ""
    assert sense_word("variant of 是[shi4]") == ""
    assert sense_word("surname Li") == ""
    # not "choice": a question's stop word is a sense's meaning
    assert sense_word("to have no choice") == ""
    assert sense_word("very good") == ""


def test_the_one_word_senses_of_each_entry_in_both_spellings() -> None:
    pairs = senses(LINES)
    assert {w for h, w in pairs if h == "延迟"} == {"delay", "postpone", "lag"}
    assert {w for h, w in pairs if h == "延遲"} == {"delay", "postpone", "lag"}
    assert ("棚子", "shed") in pairs and ("警", "alert") in pairs
    assert {w for h, w in pairs if h == "的"} == {"target"}  # both entries; `of` is no word
    assert not any(h == "是" for h, _ in pairs)  # a spelling variant means nothing of its own


def test_an_acronym_that_is_also_a_lower_case_word_keeps_its_capitals() -> None:
    pairs = senses(
        [
            "銀聯 银联 [yin2 lian2] /UnionPay (CUP)/abbr. for 中國銀聯|中国银联/CUP/\n",
            "杯子 杯子 [bei1 zi5] /cup/glass/CL:個|个[ge4]/\n",
            "取款機 取款机 [qu3 kuan3 ji1] /ATM/\n",
        ]
    )
    assert ("杯子", "cup") in pairs
    assert ("银联", "CUP") in pairs and ("银联", "cup") not in pairs  # not every cup's translation
    assert ("取款机", "atm") in pairs  # no other word is spelled `atm`
    assert ("银联", "unionpay") in pairs


def test_a_chinese_question_cut_into_dictionary_words_with_their_glosses(built: Path) -> None:
    glossary = Glossary(built)
    cut = dict(segments("复制延迟告警的处理步骤", glossary))
    assert list(cut)[:2] == ["复制", "延迟"]
    assert "lag" in cut["延迟"] and "step" in cut["步骤"] and "alert" in cut["警"]
    assert "police" in cut["警"]  # one character is glossed: it stands for itself here
    assert segments("no Chinese here", glossary) == []
    glossary.close()


def test_a_chinese_question_s_function_words_are_cut_but_never_glossed(built: Path) -> None:
    glossary = Glossary(built)
    glossed = {w for _, words in segments("复制延迟告警的处理步骤", glossary) for w in words}
    assert "taxi" not in glossed and "target" not in glossed  # 的, the possessive particle
    assert [word for word, _ in segments("这个人是谁", glossary)] == ["人"]
    # cut as words, so that no dictionary word is read across them
    assert [word for word, _ in segments("我们的会议在哪里", glossary)] == ["会议"]
    glossary.close()


def test_english_words_translated_and_too_vague_ones_left_out(built: Path) -> None:
    glossary = Glossary(built)
    found = translations(["weekend", "ramen", "budgets", "xyzzy", "read your writes"], glossary)
    assert ["周末", "週末"] in found and ["拉面", "拉麵"] in found
    assert any("预算" in words for words in found)  # `budgets` by its singular
    assert len(found) == 3  # `xyzzy` has none; a phrase is not a word
    assert translations(["plan"], glossary) == []  # more Chinese words than it can stand for
    glossary.close()


def test_a_phrase_the_dictionary_holds_is_translated_whole(built: Path) -> None:
    glossary = Glossary(built)
    # word by word: `asked` is 自找 ("you asked for it"), `questions` too many words to mean any
    assert translations(["frequently", "asked", "questions"], glossary) == [
        ["常問問題", "常问问题"]
    ]
    assert translations(["asked"], glossary) == [["自找"]]
    # by the phrase's plural too, and the words after it on their own
    assert translations(["credit", "cards", "ramen"], glossary) == [["信用卡"], ["拉面", "拉麵"]]
    # a phrase is of words in a row: another term between them is no phrase
    assert ["信用卡"] not in translations(["credit", "1432", "card"], glossary)
    assert dict(segments("信用卡", glossary)) == {"信用卡": ["credit card"]}
    glossary.close()


def test_an_acronym_translates_only_a_word_the_question_writes_in_capitals(built: Path) -> None:
    glossary = Glossary(built)
    assert not any("银联" in words for words in translations(["coffee", "cup"], glossary))
    assert any(
        "银联" in words
        for words in translations(["cup"], glossary, written_in_capitals("CUP card"))
    )
    assert any(
        "密码" in words
        for words in translations(["pins"], glossary, written_in_capitals("my PINs"))
    )
    assert not any("密码" in words for words in translations(["pin"], glossary))  # a safety pin
    assert "atm" in dict(segments("取款机", glossary))["取款机"]  # no other word is `atm`
    assert "cup" in dict(segments("银联", glossary))["银联"]  # the keyword leg's case
    glossary.close()


def test_a_damaged_glossary_is_built_anew(built: Path, tmp_path: Path) -> None:
    path = cached_path(tmp_path)
    assert path is not None
    path.write_bytes(b"not a database" * 100)
    glossary = open_glossary(tmp_path)
    assert glossary is not None and dict(segments("预算", glossary)) == {"预算": ["budget"]}
    glossary.close()


def test_building_removes_the_glossaries_of_other_rules_and_versions(tmp_path: Path) -> None:
    path = cached_path(tmp_path)
    assert path is not None
    older = [tmp_path / "cedict-1.2.0-rules3.sqlite", tmp_path / "cedict-1.0-rules4.sqlite"]
    kept = [tmp_path / "vaults" / "cedict-1.2.0-rules3.sqlite", tmp_path / "cedict-notes.sqlite"]
    for file in [*older, *kept]:
        file.parent.mkdir(exist_ok=True)
        file.write_bytes(b"old")
    build(path)
    assert path.is_file() and all(f.exists() for f in kept)
    assert not any(f.exists() for f in older)


def test_no_place_to_build_it_means_no_glossary_and_a_notice(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert open_glossary(blocked) is None
    assert "no Chinese-English glossary" in glossary.unavailable(blocked)


def test_without_the_dictionary_there_is_no_glossary_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(glossary, "_DICTIONARY", "no-such-distribution")
    assert cached_path(tmp_path) is None and open_glossary(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_two_builders_at_once_leave_one_whole_file(tmp_path: Path) -> None:
    """A server and a shell's first questions across scripts may build it together."""
    path = cached_path(tmp_path)
    assert path is not None
    builders = [threading.Thread(target=build, args=(path,)) for _ in range(2)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    glossary = Glossary(path)
    assert dict(segments("预算", glossary)) == {"预算": ["budget"]}
    glossary.close()


def test_a_build_removes_a_killed_build_s_old_temporary_file_but_not_a_fresh_one(
    tmp_path: Path,
) -> None:
    import os
    import time

    old, fresh = tmp_path / ".cedict-old.tmp", tmp_path / ".cedict-fresh.tmp"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    hours_ago = time.time() - 2 * glossary.ABANDONED_AFTER
    os.utime(old, (hours_ago, hours_ago))
    path = cached_path(tmp_path)
    assert path is not None
    build(path)
    assert not old.exists() and fresh.exists()


def test_a_folder_at_its_path_means_no_glossary_and_a_notice(tmp_path: Path) -> None:
    path = cached_path(tmp_path)
    assert path is not None
    path.mkdir()
    assert open_glossary(tmp_path) is None
    assert "one script only" in glossary.unavailable(tmp_path)


@pytest.mark.parametrize(
    ("spoiled", "said"),
    [
        ("a folder at its path", "no Chinese-English glossary at"),
        ("damaged", "the Chinese-English glossary was damaged and is built anew"),
    ],
)
def test_what_befell_the_glossary_is_said_by_query_json_and_memory_search(
    indexed_vault: VaultIndexer, tmp_path: Path, spoiled: str, said: str
) -> None:
    """A real `memsync query --json` and a real MCP server's memory_search, each asked in
    Chinese of a vault with English notes, list the glossary's notice among their notices."""
    import json

    from memsync.config import data_dir
    from tests.agent.test_mcp import calls
    from tests.conftest import memsync, write

    vault, db = tmp_path / "notes", tmp_path / "i.sqlite"
    write(vault, "budget.md", "# Budget\n\nThe budget for the heron project is approved.\n")
    write(vault, "笔记.md", "# 笔记\n\n测试服务器的SSH端口是2222。\n")
    indexed_vault(vault, db=db)
    path = cached_path(data_dir())
    assert path is not None
    path.unlink()  # the session's glossary, linked here for this test

    def spoil() -> None:
        if spoiled == "damaged":
            path.write_bytes(b"not a database" * 100)
        else:
            path.mkdir(exist_ok=True)

    question = ["--db", str(db)]
    spoil()
    found = memsync("query", "预算", *question, "--mode", "keyword", "--json")
    assert any(said in notice for notice in json.loads(found.stdout)["notices"]), found.stdout
    spoil()  # built anew by that query
    [(error, text, searched)] = calls(
        question, ("memory_search", {"query": "预算", "mode": "keyword"})
    )
    assert not error and any(said in notice for notice in searched["notices"]), text
