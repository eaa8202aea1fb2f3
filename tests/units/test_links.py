"""Links as Obsidian users write them, pure: what links.parse finds (and what it leaves alone),
what a link asks links.resolve for (which note answers is the store's: test_store_contract), the
lines links.sections gives, and aliases from front matter."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from memsync.links.parse import Link, links_in, wikilink_location
from memsync.links.resolve import NOWHERE, name_key, path_key, wanted
from memsync.links.sections import headings, missing, section
from memsync.metadata import heading, parse

NOTE = """# Heron
[[Target]] [[Target.md]] [[Target|shown text]]
[[Target#Heading]] [[Target#Heading#Sub]] [[Target#^block-id]]
[[#Heading]] ![[Embedded]] ![[Target#Heading|its part]]
[t](folder/note.md) [t](note.md#Heading) [t](<a note.md>) [t](a%20note.md) [t](folder/note)
"""


def _found(text: str, source: str = "notes/heron.md") -> list[tuple[int, str, str, str | None]]:
    """(line, kind, target, anchor) of each link, in order."""
    return [(link.line, link.kind, link.target, link.anchor) for link in links_in(source, text)]


def test_every_form_of_link_is_found_with_its_line_target_and_anchor() -> None:
    assert _found(NOTE) == [
        (2, "link", "Target", None),
        (2, "link", "Target.md", None),
        (2, "link", "Target", None),
        (3, "link", "Target", "Heading"),
        (3, "link", "Target", "Heading#Sub"),
        (3, "link", "Target", "^block-id"),
        (4, "link", "", "Heading"),
        (4, "embed", "Embedded", None),
        (4, "embed", "Target", "Heading"),
        (5, "link", "folder/note.md", None),
        (5, "link", "note.md", "Heading"),
        (5, "link", "a note.md", None),
        (5, "link", "a note.md", None),
        (5, "link", "folder/note", None),
    ]
    links = links_in("notes/heron.md", NOTE)
    assert links[2].written == "[[Target|shown text]]"
    assert [link.style for link in links[9:]] == ["markdown"] * 5
    assert {link.style for link in links[:9]} == {"wiki"}


def test_a_pipe_escaped_in_a_table_still_ends_the_target() -> None:
    assert _found("| [[Heron\\|the design]] | x |\n") == [(1, "link", "Heron", None)]


@pytest.mark.parametrize(
    "text",
    [
        "in code `[[Heron]]` and ``[t](heron.md)``",
        "```\n[[Heron]]\n[t](heron.md)\n```",
        "> [!note]\n> ```md\n> [[Heron\\|x]]\n> ```",
        "~~~markdown\n![[Heron]]\n~~~",
        "escaped \\[\\[Heron]] and \\[t](heron.md)",
        "[site](https://example.com/heron.md) [m](mailto:a@example.com) [o](obsidian://open?x)",
        "[proto](//example.com/heron.md) <https://example.com/a.md>",
        "[out](../../outside.md) [far](../../../a/b.md) [root](/../outside.md) [r](/a/../../x)",
        "![picture](pic.png) ![[pic.png]] [[paper.pdf]] [sheet](data.csv) ![[clip.mp4]]",
        "[[]] [[#]] [t]()",
    ],
)
def test_what_is_not_a_link_to_a_note(text: str) -> None:
    """Code, escapes, URLs, paths out of the vault (the note sits one folder down) and files
    that are not notes."""
    assert links_in("notes/heron.md", text) == []


def test_a_fence_ends_and_the_links_after_it_keep_their_lines() -> None:
    text = "```\n[[inside]]\n```\n\nafter `x` [[Heron]]\n"
    assert _found(text) == [(5, "link", "Heron", None)]


def test_a_fence_in_a_note_saved_with_crlf_ends_too() -> None:
    """Its closing line is "```\r" once split at \n: the links after it were all dropped."""
    text = "```\r\n[[inside]]\r\n```\r\n\r\nafter [[Heron]]\r\n"
    assert _found(text) == [(5, "link", "Heron", None)]


def test_lines_end_at_a_lone_carriage_return_as_get_numbers_them() -> None:
    """A note saved with classic Mac line ends (\r alone), or mixed ones: its links' lines are
    the lines `get` and query cite, not all line 1."""
    assert _found("one\rtwo\r\rfour [[Heron]]\rfive\r") == [(4, "link", "Heron", None)]
    assert _found("one\r\ntwo\r\n\r\nfour [[Heron]]\r\n") == [(4, "link", "Heron", None)]
    mixed = "a\r\r\n[[b]]\r[[c]]\n[x](d.md)"
    assert [line for line, *_ in _found(mixed)] == [3, 4, 5]


def test_a_dotted_name_is_a_note_and_a_path_one_folder_up_stays_in_the_vault() -> None:
    assert _found("[[Node.js]] [up](../x.md)") == [
        (1, "link", "Node.js", None),
        (1, "link", "../x.md", None),
    ]


def test_the_text_get_takes_is_one_wikilink_or_a_path() -> None:
    assert wikilink_location("[[Heron#Conflicts]]") == ("Heron", "Conflicts")
    assert wikilink_location(" ![[folder/Heron|shown]] ") == ("folder/Heron", None)
    assert wikilink_location("[[Heron#^b1]]") == ("Heron", "^b1")
    assert wikilink_location("notes/heron.md:3") is None
    assert wikilink_location("[[a]] [[b]]") is None


@pytest.mark.parametrize(
    "front, aliases",
    [
        ("aliases: [Heron sync design, HSD]", ("Heron sync design", "HSD")),
        ("aliases:\n  - Heron sync design\n  - HSD", ("Heron sync design", "HSD")),
        ("aliases: Heron sync design, HSD", ("Heron sync design", "HSD")),
        ("alias: HSD", ("HSD",)),
        ("aliases: [HSD]\nalias: HSD", ("HSD",)),
        ("title: Heron", ()),
    ],
)
def test_aliases_as_a_list_a_string_or_alias(front: str, aliases: tuple[str, ...]) -> None:
    assert parse("heron.md", f"---\n{front}\n---\n# Heron\n").aliases == aliases


def asks(source: str, text: str) -> tuple[str, tuple[str, ...]]:
    """What the one link in `text`, written in `source`, asks the index for: by name, by path
    (its keys in order) or its own note. Which note answers is the store's (its contract tests)."""
    [link] = links_in(source, text)
    want = wanted(source, link)
    return want.by, want.keys


DESIGN_NAME = ("name", (name_key("projects/Heron sync design.md"),))
SPACED = ("path", ("projects/design/my note", "design/my note"))


@pytest.mark.parametrize(
    "source, text, asked",
    [
        # a bare name, with or without .md, in any case: the file name
        ("daily/x.md", "[[Heron sync design]]", DESIGN_NAME),
        ("daily/x.md", "[[heron SYNC design.md]]", DESIGN_NAME),
        ("daily/x.md", "![[Heron sync design#H]]", DESIGN_NAME),
        ("x.md", "[[Node.js]]", ("name", ("node.js",))),
        # a same-note link: its own note
        ("notes/heron.md", "[[#Conflicts]]", ("self", ("notes/heron",))),
        ("notes/heron.md", "[t](#Conflicts)", ("self", ("notes/heron",))),
        # a wikilink's path: from the vault root, never from the linking note
        ("projects/a.md", "[[design/x]]", ("path", ("design/x",))),
        ("projects/a.md", "[[Design/X.md]]", ("path", ("design/x",))),
        # a Markdown link's path: relative to the note, then from the root
        ("projects/a.md", "[t](design/x.md)", ("path", ("projects/design/x", "design/x"))),
        ("projects/a.md", "[t](/design/x.md)", ("path", ("design/x",))),
        ("projects/a.md", "[t](../design/x)", ("path", ("design/x",))),
        ("projects/a.md", "[t](<design/my note.md>)", SPACED),
        ("projects/a.md", "[t](design/my%20note.md)", SPACED),
        # one without a folder: Obsidian's shortest form, a name (beside the note, then the root)
        ("projects/a.md", "[t](Heron%20sync%20design.md)", DESIGN_NAME),
        # a path never falls back to a bare name
        ("x.md", "[[archive/heron]]", ("path", ("archive/heron",))),
        ("x.md", "[t](archive/heron.md)", ("path", ("archive/heron",))),
    ],
)
def test_what_a_link_asks_for(source: str, text: str, asked: tuple[str, tuple[str, ...]]) -> None:
    assert asks(source, text) == asked


def test_names_compare_nfc_normalised_as_macos_stores_them_decomposed() -> None:
    decomposed = "cafe\u0301/Re\u0301sume\u0301.md"
    assert asks("x.md", "[[r\u00e9sum\u00e9]]") == ("name", (name_key(decomposed),))
    assert asks("x.md", "[[CAF\u00c9/R\u00c9SUM\u00c9]]") == ("path", (path_key(decomposed),))


def test_a_relative_path_that_climbs_out_of_the_vault_from_a_moved_note_asks_for_nowhere() -> None:
    """The store writes a moved note's links again from its new folder, where one may climb
    out: it still asks for a key, one no note's path has."""
    climbing = Link(2, "[y](../../y.md)", "../../y.md", None, "link", "markdown")
    assert wanted("deep.md", climbing).keys == (NOWHERE,)
    assert NOWHERE not in {path_key(p) for p in ("/", "a/", "/a.md", "//x.md")}
    assert wanted("a/b/deep.md", climbing).keys == ("y",)


def test_an_alias_written_as_a_link_asks_for_a_file_name() -> None:
    """Obsidian shows [[alias]] as unresolved: a link asks for a file name or a path only."""
    assert parse("heron.md", "---\naliases: [HSD]\n---\n# Heron\n").aliases == ("HSD",)
    assert asks("x.md", "[[HSD]]") == ("name", ("hsd",))


SECTIONS = """---
title: Heron
---
# Heron
intro
## Conflicts
conflict text
### Sub
sub text
```
# not a heading
```
## Other: the rest
other
# Second
Paragraph one
continues here ^para

- item one
- item two ^item
- item three

A block
spanning
^alone
"""


@pytest.mark.parametrize(
    "anchor, lines",
    [
        ("Heron", (4, 14)),
        ("Conflicts", (6, 12)),
        ("heron#CONFLICTS", (6, 12)),
        ("Heron#Conflicts#Sub", (8, 12)),
        ("Conflicts#Sub", (8, 12)),
        ("Other the rest", (13, 14)),
        ("Second", (15, 25)),
        ("^para", (16, 17)),
        ("^item", (20, 20)),
        ("^alone", (23, 25)),
    ],
)
def test_a_heading_s_section_and_a_block_s_lines(anchor: str, lines: tuple[int, int]) -> None:
    """A heading runs to the line before the next heading of its level or higher (a `#` in
    fenced code is none); A#B is B inside A; a block is its paragraph, its list item, or the
    block above an id alone on its line."""
    assert section(SECTIONS, anchor) == lines


@pytest.mark.parametrize("anchor", ["Missing", "Other#Sub", "Sub#Conflicts", "^nope", "^par"])
def test_a_heading_or_block_the_note_lacks_is_none(anchor: str) -> None:
    assert section(SECTIONS, anchor) is None


def test_the_missing_message_is_one_line_listing_the_headings() -> None:
    assert [h.title for h in headings(SECTIONS)] == [
        "Heron",
        "Conflicts",
        "Sub",
        "Other: the rest",
        "Second",
    ]
    said = missing("heron.md", "Missing", SECTIONS)
    assert said == (
        "heron.md has no heading 'Missing'; its headings: Heron, Conflicts, Sub, "
        "Other: the rest, Second"
    )
    assert missing("heron.md", "^nope", SECTIONS) == "heron.md has no block ^nope"
    no_headings = missing("plain.md", "X", "just text\n")
    assert no_headings == "plain.md has no heading 'X'; it has no headings"


def test_an_empty_block_id_names_no_block() -> None:
    """`[[Note#^]]` is not the line that ends in a lone `^` (it matched one before)."""
    text = "intro\nan aside ending in a caret ^\nlast\n"
    assert section(text, "^") is None
    assert missing("a.md", "^", text) == (
        "a.md#^ names no block: give the block's id after ^ ([[Note#^id]])"
    )


def test_the_missing_message_lists_a_few_thousand_characters_of_headings_and_the_count_left() -> (
    None
):
    """A note of 10,000 headings once made a message of 100,000 characters."""
    text = "".join(f"## Heading number {n}\n" for n in range(10_000))
    said = missing("big.md", "Nope", text)
    assert len(said) < 2_500
    assert said.startswith("big.md has no heading 'Nope'; its headings: Heading number 0, ")
    shown = said.split("; its headings: ")[1].split(", and ")[0].split(", ")
    assert said.endswith(f", and {10_000 - len(shown):,} more")
    assert shown[-1] == f"Heading number {len(shown) - 1}"


def test_a_link_keeps_what_the_store_needs_to_write_it_again() -> None:
    """A moved note's links are written again from their rows: every field a Link has."""
    [link] = links_in("a.md", "x\n![[Heron#Conflicts|the part]]\n")
    assert link == Link(2, "![[Heron#Conflicts|the part]]", "Heron", "Conflicts", "embed", "wiki")


# (what a note opens with, the unit repeated to a megabyte, what ends that line): the shapes
# that made a regex read on from each of many starts to one far end (bench_links --hostile
# times each reader on them)
HOSTILE = [
    ("", "`", ""),
    ("", "`` ` ```a", ""),
    ("[", "\\[", ""),
    ("", "[", ""),
    ("", "[[a", ""),
    ("", "](", ""),
    ("", "[a](", ""),
    ("", "[a](<", ""),
    ("", "[a\\](x ", ""),
    ("", '[a](b "', ""),
    ("", "*_|$<", ""),
    ("", " ", "a"),
    ("# a", " ", "b"),
    ("# a", " #", "b"),
    ("", "```x\n", ""),
    ("", "~~~x\n", ""),
    ("", "[\\[\n", ""),
    ("", "a ^\n", ""),
]
MB = 1 << 20


def _megabyte(head: str, unit: str, tail: str) -> str:
    return head + unit * ((MB - len(head)) // len(unit)) + tail + "\n[[a]] [b](c.md)\n"


def _seconds(read: Callable[[str], object], text: str) -> float:
    started = time.perf_counter()
    read(text)
    return time.perf_counter() - started


READERS: list[Callable[[str], object]] = [
    lambda text: links_in("a/note.md", text),
    headings,
    lambda text: section(text, "Nope#Sub"),
    lambda text: section(text, "^x"),
    lambda text: missing("a/note.md", "Nope", text),
    lambda text: parse("a/note.md", text),
    lambda text: [heading(line, indented=True) for line in text.split("\n")],
]


@pytest.mark.parametrize("head, unit, tail", HOSTILE)
def test_a_megabyte_of_any_shape_is_read_in_time_linear_in_its_size(
    head: str, unit: str, tail: str
) -> None:
    """A line of backticks, or `[` then many `\\[`, took 2 s for 16 KB and 35 s for 64 KB (a
    megabyte: hours), holding the interpreter lock. The bound only catches such a blow-up: 50
    times what a megabyte of plain text with links takes, and 2 s more."""
    plain = "The quick brown fox jumps over the lazy dog [[Fox]] and [a](b.md).\n" * (MB // 68)
    hostile = _megabyte(head, unit, tail)
    for read in READERS:
        assert _seconds(read, hostile) < 50 * _seconds(read, plain) + 2
