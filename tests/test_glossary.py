from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memsync.glossary import (
    Glossary,
    cached_path,
    open_glossary,
    segments,
    sense_words,
    tables,
    translations,
)

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


def test_a_sense_keeps_its_content_words_and_a_cross_reference_has_none() -> None:
    assert sense_words("(computing) to lag") == ["lag"]
    assert sense_words("to take down (in writing)") == ["take", "down"]
    assert sense_words("CL:間|间[jian1]") == []
    assert sense_words("variant of 是[shi4]") == []
    assert sense_words("surname Li") == []


def test_both_directions_from_dictionary_lines() -> None:
    glosses, english = tables(LINES)
    assert glosses["延迟"] == glosses["延遲"] == ["delay", "postpone", "lag"]
    assert "target" in glosses["的"] and "of" not in glosses["的"]  # both entries, no filler
    assert "是" not in glosses  # a spelling variant glosses nothing
    assert ("shed", "棚子") in english and ("lag", "延迟") in english
    # one character stands for too much to translate an English word to it
    assert not any(head == "警" for _, head in english)


def test_a_chinese_question_cut_into_dictionary_words_with_their_glosses(built: Path) -> None:
    glossary = Glossary(built)
    cut = dict(segments("复制延迟告警的处理步骤", glossary))
    assert list(cut)[:2] == ["复制", "延迟"]
    assert "lag" in cut["延迟"] and "step" in cut["步骤"] and "alert" in cut["警"]
    assert segments("no Chinese here", glossary) == []
    glossary.close()


def test_english_words_translated_and_too_vague_ones_left_out(built: Path) -> None:
    glossary = Glossary(built)
    found = translations(["weekend", "ramen", "budgets", "xyzzy", "read your writes"], glossary)
    assert ["周末", "週末"] in found and ["拉面", "拉麵"] in found
    assert any("预算" in words for words in found)  # `budgets` by its singular
    assert len(found) == 3  # `xyzzy` has none; a phrase is not a word
    assert translations(["plan"], glossary) == []  # more Chinese words than it can stand for
    glossary.close()


def test_a_damaged_glossary_is_built_anew(built: Path, tmp_path: Path) -> None:
    path = cached_path(tmp_path)
    assert path is not None
    path.write_bytes(b"not a database" * 100)
    glossary = open_glossary(tmp_path)
    assert glossary is not None and dict(segments("预算", glossary)) == {"预算": ["budget"]}
    glossary.close()


def test_no_place_to_build_it_means_no_glossary_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING, logger="memsync.glossary"):
        assert open_glossary(blocked) is None
    assert "no Chinese-English glossary" in caplog.text
