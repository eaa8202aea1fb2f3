from __future__ import annotations

import unicodedata

from memsync.notes import Lines
from memsync.output import (
    explanation,
    lines_result,
    query_text,
    search_text,
    wants_color,
)
from memsync.search.pipeline import Answer, Hit
from memsync.text import escape_controls, escape_name, unescape_name


def _answer() -> Answer:
    hit = Hit(
        "tech/redis.md",
        1,
        4,
        0.91,
        0.8,
        0.7,
        "The staging Redis listens on port 6380.",
        3,
        0.91,
        True,
    )
    return Answer(
        "redis port", "keyword", "hybrid", [hit], ["vector search unavailable: no vectors"]
    )


def test_colour_only_on_a_terminal_without_no_color() -> None:
    assert wants_color(True, {})
    assert not wants_color(False, {})
    assert not wants_color(True, {"NO_COLOR": ""})
    assert not wants_color(True, {"TERM": "dumb"})


def test_human_output_names_the_mode_that_ran_and_highlights_only_with_colour() -> None:
    plain = query_text(_answer(), ["redis", "port"], color=False)
    assert "(ran keyword search; hybrid was asked for)" in plain
    assert "note: vector search unavailable: no vectors" in plain
    assert "1. 0.91  tech/redis.md:1-4  exact match" in plain
    assert "    3 | The staging Redis listens on port 6380." in plain
    assert "\033[" not in plain
    coloured = query_text(_answer(), ["redis", "port"], color=True)
    assert "\033[1;33mRedis\033[0m" in coloured and "\033[1;33mport\033[0m" in coloured


def test_explanation_names_every_factor_between_the_fused_score_and_the_shown_one() -> None:
    why = {
        "bm25": -2.5,
        "text_score": 0.7,
        "cosine": 0.85,
        "vector_score": 0.6,
        "exact_match": False,
        "fused": 0.63,
        "decay": 1.0,
        "note_repeat": 0.54,
        "mmr_penalty": None,
    }
    assert explanation(why) == (
        "bm25 -2.5 -> text 0.7; cosine 0.85 -> vector 0.6; fused 0.63; note repeat x0.54"
    )
    assert "repeat" not in explanation({**why, "note_repeat": 1.0})
    assert explanation({**why, "nearest_window": [12, 15]}).endswith(
        "; nearest window: lines 12-15"
    )


def test_control_characters_are_shown_as_escapes_and_tabs_and_text_kept() -> None:
    assert escape_controls("a\tb 端口 é") == "a\tb 端口 é"
    assert escape_controls("x\x1b[31my\rz\nw\x7f\x9b\x00") == "x\\x1b[31my\\rz\\nw\\x7f\\x9b\\x00"
    for name in ("x\x1b[31my\rz\nw\x7f\x9b\x00", "a\tb 端口 é.md", "plain/name.md"):
        assert unescape_name(escape_controls(name)) == name  # what `get` reads back


def test_the_mcp_tools_texts_show_control_characters_as_escapes_and_their_data_as_is() -> None:
    """An agent's client shows tool results on a terminal too."""
    hit = {
        "path": "evil\nname.md",
        "start_line": 1,
        "end_line": 3,
        "score": 0.8,
        "vector_score": None,
        "text_score": 0.8,
        "hybrid_match": False,
        "snippet": "wombat \x1b]52;c;ZWNobw==\x07\nkoala",
        "snippet_start_line": 2,
        "citation": "evil\nname.md#L1-L3",
    }
    text = search_text({"query": "wombat", "mode": "keyword", "notices": [], "results": [hit]})
    assert "1. evil\\nname.md#L1-L3" in text and "2 | wombat \\x1b]52;c;ZWNobw==\\x07" in text
    assert text.endswith("\n   3 | koala")  # each line with its number, as memory_get shows it
    lines = Lines("evil\nname.md", 1, 2, 2, "# Evil\nwombat \x1b[2J", False)
    shown, data = lines_result(lines)
    assert shown == "1 | # Evil\n2 | wombat \\x1b[2J"
    assert data["text"] == "# Evil\nwombat \x1b[2J" and data["path"] == "evil\nname.md"


def test_a_name_round_trips_through_its_escapes_and_shows_no_hidden_character():
    odd = [
        "new\\nline.md",
        "new\nline.md",
        "back\\x2e\\x2e.md",
        "a\u202eb.md",
        "x\\",
        "\\\\n",
        "é\u200dz\u200c\t.md",
        "\x00\x9b\u2066\ufeff.md",
        "\\u{202e}.md",
        "\\q\\.md",
    ]
    names = odd + [a + b for a in odd for b in odd]
    for name in names:
        shown = escape_name(name)
        assert unescape_name(shown) == name
        assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in shown)
        assert not any(unicodedata.category(c) == "Cf" and c not in "\u200c\u200d" for c in shown)
    assert escape_name("new\\nline.md") != escape_name("new\nline.md")
    assert escape_controls("a\u202eb") == "a\\u{202e}b"
