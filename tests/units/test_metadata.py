from __future__ import annotations

from datetime import date

import pytest

from memsync.metadata import day_of, expand, inline_tags, parse, parse_day


def test_front_matter_tags_in_every_spelling_and_nested_ancestors() -> None:
    listed = parse("a.md", "---\ntags: [Project/Heron, '#Incident']\n---\nbody\n")
    assert listed.tags == ("project/heron", "project", "incident")
    comma = parse("a.md", "---\ntags: ops, '#oncall'\n---\n")
    assert comma.tags == ("ops", "oncall")
    spaced = parse("a.md", "---\ntag: alpha beta\n---\n")
    assert spaced.tags == ("alpha", "beta")
    assert expand("#A/B/C") == ["a/b/c", "a/b", "a"] and "b" not in expand("a/b")


def test_inline_tags_skip_code_urls_headings_and_numbers() -> None:
    body = (
        "# Heading is not a tag\n"
        "Met about #heron today, see https://example.com/page#fragment and `#inline-code`.\n"
        "```\n#fenced-code\n```\n"
        "#start-of-line counts, #1984 does not, #v2 does, (#paren) does, #项目 does.\n"
    )
    assert inline_tags(body) == ["heron", "start-of-line", "v2", "paren", "项目"]


def test_malformed_front_matter_still_indexes_inline_tags_and_warns() -> None:
    meta = parse("a.md", "---\ntags: [unclosed\ntitle: x\n---\nBody with #inline\n")
    assert meta.tags == ("inline",) and meta.warning and "not valid YAML" in meta.warning
    listed = parse("a.md", "---\n- just\n- a list\n---\ntext\n")
    assert listed.warning and "not a mapping" in listed.warning


def test_a_note_s_date_is_its_daily_name_then_front_matter_then_mtime() -> None:
    named = parse("daily/2026-11-20.md", "---\ndate: 2020-01-01\n---\n")
    assert named.date == "2026-11-20"
    dated = parse("notes/x.md", "---\ndate: 2026-03-04\n---\n")
    assert dated.date == "2026-03-04"
    assert parse("notes/x.md", "---\ndate: '2026-03-05T10:00'\n---\n").date == "2026-03-05"
    undated = parse("notes/x.md", "text")
    assert undated.date is None
    from datetime import datetime

    mtime = int(datetime(2026, 5, 6, 12, 0).timestamp() * 1e9)
    assert day_of(undated, mtime) == "2026-05-06" and day_of(dated, mtime) == "2026-03-04"


def test_titles_come_from_front_matter_else_the_first_heading() -> None:
    assert parse("a.md", "---\ntitle: Runbook\n---\ntext\n").title == "Runbook"
    assert not parse("a.md", "---\ntitle: Runbook\n---\ntext\n").has_heading
    assert parse("a.md", "intro\n## Setup\n").title == "Setup"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-01", date(2026, 11, 1)),
        ("today", date(2026, 11, 30)),
        ("yesterday", date(2026, 11, 29)),
        ("7d", date(2026, 11, 23)),
        ("2w", date(2026, 11, 16)),
        ("1m", date(2026, 10, 31)),
    ],
)
def test_dates_a_user_types(text: str, expected: date) -> None:
    assert parse_day(text, date(2026, 11, 30)) == expected


def test_a_date_that_is_not_one_says_what_is_accepted() -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD, today, yesterday, or Nd"):
        parse_day("last tuesday", date(2026, 11, 30))


NESTED_ALIASES = (
    "---\na: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8)
    )
    + "tags: [*i]\n---\nbody #kept\n"
)


@pytest.mark.parametrize(
    ("front", "warning"),
    [
        ("date: 2026-02-30", "cannot be read"),
        ("date: 2026-13-01", "cannot be read"),
        ("date: 0000-01-01", "cannot be read"),
        ("n: " + "9" * 5000, "cannot be read"),
        ("deep: " + "[" * 3000 + "]" * 3000, "cannot be read"),
        ("title: " + "t" * 2000, "title is longer than 1024"),
        ("tags: [" + ", ".join(f"t{i}" for i in range(150)) + "]", "more than 100 tags"),
        ("aliases: [" + "n, " * 20_000 + "x]", "longer than 32,768 characters"),
    ],
)
def test_front_matter_that_cannot_be_read_costs_only_the_metadata(front: str, warning: str) -> None:
    meta = parse("a.md", f"---\n{front}\n---\n# Heading\n\nbody #kept\n")
    assert (
        meta.warning is not None and warning in meta.warning and "indexed as text" in meta.warning
    )
    assert len(meta.warning) < 300
    assert meta.tags == ("kept",) and meta.title == "Heading" and meta.date is None


def test_yaml_aliases_are_refused_before_they_expand() -> None:
    meta = parse("a.md", NESTED_ALIASES)
    assert meta.warning == "front matter uses YAML aliases (*name): indexed as text"
    assert meta.tags == ("kept",)
    anchored = parse("a.md", "---\ntitle: &t Plain\n---\n")  # an anchor alone is harmless
    assert anchored.title == "Plain" and anchored.warning is None


@pytest.mark.parametrize("text", ["99999m", "99999d0", "0000-01-01", "10000-01-01"])
def test_out_of_range_dates_say_what_a_date_is(text: str) -> None:
    with pytest.raises(ValueError, match="is not a date: use YYYY-MM-DD"):
        parse_day(text, date(2026, 11, 30))
