"""`memsync links`, `get '[[Note#Heading]]'` and the link counts of `status`, on a linked vault
indexed keyword-only; and what a reader of an index from before links says."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx2
import pytest

from memsync.web.tokens import Tokens
from tests.conftest import VaultIndexer, cli, free_port, memsync, older_index, write
from tests.daemon.test_serve_cli import _wait_until_served, serve

DESIGN = "projects/Heron sync design.md"


@pytest.fixture
def linked(indexed_vault: VaultIndexer, tmp_path: Path) -> Path:
    """A vault whose notes link to the design note by name, by alias, by path and by block."""
    vault = tmp_path / "notes"
    write(
        vault,
        DESIGN,
        "---\naliases: [HSD]\n---\n# Heron sync design\nHeron syncs notes.\n## Conflicts\n"
        "Last writer wins. ^lww\n### Clocks\nHybrid clocks.\n## Storage\nPostgres 16.\n",
    )
    write(
        vault,
        "daily/2026-11-20.md",
        "# 2026-11-20\n\nRead [[Heron sync design#Conflicts]] today.\n"
        "Ask about [[Kafka]] and [[HSD]].\n",
    )
    write(
        vault,
        "ops/runbook.md",
        "# Runbook\n\nSee [design](../projects/Heron%20sync%20design.md) and "
        "![[Heron sync design#^lww]].\n",
    )
    indexed_vault(vault)
    return vault


DAILY_LINE = "Read [[Heron sync design#Conflicts]] today."
RUNBOOK_LINE = "See [design](../projects/Heron%20sync%20design.md) and ![[Heron sync design#^lww]]."
BACKLINKS = [  # the runbook's line links twice: listed once (the JSON has each link)
    "backlinks: 3, on 2 lines",
    f"  daily/2026-11-20.md:3: {DAILY_LINE}",
    f"  ops/runbook.md:3: {RUNBOOK_LINE}",
]


@pytest.mark.parametrize(
    "note", [DESIGN, "[[Heron sync design]]", "[[heron SYNC design]]", "[[HSD]]"]
)
def test_links_of_a_note_named_by_path_name_or_alias(linked: Path, note: str) -> None:
    done = cli("links", note, "--vault", str(linked))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{DESIGN}: 0 link(s)", *BACKLINKS]


def test_a_note_s_outgoing_links_as_text_and_json(linked: Path) -> None:
    text = cli("links", "daily/2026-11-20.md", "--vault", str(linked)).stdout
    assert text.splitlines() == [
        "daily/2026-11-20.md: 3 link(s)",
        f"  3: [[Heron sync design#Conflicts]] -> {DESIGN}",
        "  4: [[Kafka]] -> unresolved",
        "  4: [[HSD]] -> unresolved",
        "backlinks: 0",
    ]
    data = json.loads(cli("links", "ops/runbook.md", "--vault", str(linked), "--json").stdout)
    assert data == {
        "path": "ops/runbook.md",
        "links": [
            {
                "path": "ops/runbook.md",
                "line": 3,
                "link": "[design](../projects/Heron%20sync%20design.md)",
                "kind": "link",
                "target": "../projects/Heron sync design.md",
                "anchor": None,
                "resolved": DESIGN,
                "citation": "ops/runbook.md#L3-L3",
            },
            {
                "path": "ops/runbook.md",
                "line": 3,
                "link": "![[Heron sync design#^lww]]",
                "kind": "embed",
                "target": "Heron sync design",
                "anchor": "^lww",
                "resolved": DESIGN,
                "citation": "ops/runbook.md#L3-L3",
            },
        ],
        "backlinks": [],
        "more": "",
    }
    design = json.loads(cli("links", "[[HSD]]", "--vault", str(linked), "--json").stdout)
    assert [(b["path"], b["line"], b["link"], b["text"]) for b in design["backlinks"]] == [
        ("daily/2026-11-20.md", 3, "[[Heron sync design#Conflicts]]", DAILY_LINE),
        ("ops/runbook.md", 3, "[design](../projects/Heron%20sync%20design.md)", RUNBOOK_LINE),
        ("ops/runbook.md", 3, "![[Heron sync design#^lww]]", RUNBOOK_LINE),
    ]


def test_unresolved_links_exit_0_as_text_and_json(
    indexed_vault: VaultIndexer, linked: Path
) -> None:
    """[[HSD]] is an alias written as a link: Obsidian shows it unresolved, and so does memsync."""
    done = cli("links", "--unresolved", "--vault", str(linked))
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "daily/2026-11-20.md:4: [[Kafka]]",
        "daily/2026-11-20.md:4: [[HSD]]",
    ]
    listed = json.loads(cli("links", "--unresolved", "--vault", str(linked), "--json").stdout)
    assert [(e["path"], e["line"], e["link"], e["resolved"]) for e in listed] == [
        ("daily/2026-11-20.md", 4, "[[Kafka]]", None),
        ("daily/2026-11-20.md", 4, "[[HSD]]", None),
    ]
    write(linked, "ops/kafka.md", "# Kafka\n")
    write(linked, "daily/2026-11-20.md", "# 2026-11-20\n\nAsk about [[Kafka]].\n")
    indexed_vault(linked)
    cleared = cli("links", "--unresolved", "--vault", str(linked))
    assert cleared.returncode == 0 and cleared.stdout == "no unresolved links\n"


def test_unresolved_lists_broken_links_and_ambiguous_the_names_left_to_a_tie_break(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    """A name two notes share is no broken link; it is ambiguous only where neither note
    stands beside the linking note (a relative `[x](Overview.md)` beside its target is not)."""
    vault = tmp_path / "notes"
    write(vault, "a/Overview.md", "# A\n")
    write(vault, "b/Overview.md", "# B\n")
    write(vault, "a/index.md", "[x](Overview.md) [[Overview]] [[Gone]]\n")
    write(vault, "c/index.md", "See [[Overview]].\n")
    indexed_vault(vault)
    broken = cli("links", "--unresolved", "--vault", str(vault))
    assert broken.stdout.splitlines() == ["a/index.md:1: [[Gone]]"]
    ambiguous = cli("links", "--ambiguous", "--vault", str(vault))
    assert ambiguous.returncode == 0
    assert ambiguous.stdout.splitlines() == ["c/index.md:1: [[Overview]] -> a/Overview.md"]
    listed = json.loads(cli("links", "--ambiguous", "--vault", str(vault), "--json").stdout)
    assert [(e["path"], e["line"], e["link"], e["resolved"]) for e in listed] == [
        ("c/index.md", 1, "[[Overview]]", "a/Overview.md")
    ]
    (vault / "b/Overview.md").unlink()
    indexed_vault(vault)
    assert cli("links", "--ambiguous", "--vault", str(vault)).stdout == "no ambiguous links\n"


def test_links_takes_a_note_or_unresolved_and_names_a_note_it_cannot_find(linked: Path) -> None:
    assert cli("links", "--vault", str(linked)).returncode == 2
    assert cli("links", DESIGN, "--unresolved", "--vault", str(linked)).returncode == 2
    assert cli("links", "--unresolved", "--ambiguous", "--vault", str(linked)).returncode == 2
    unknown = cli("links", "[[Nobody]]", "--vault", str(linked))
    assert unknown.returncode == 1 and "no note named 'Nobody'" in unknown.stderr
    missing = cli("links", "ops/none.md", "--vault", str(linked))
    assert missing.returncode == 1 and "no note at ops/none.md" in missing.stderr


CONFLICTS = [
    "6 | ## Conflicts",
    "7 | Last writer wins. ^lww",
    "8 | ### Clocks",
    "9 | Hybrid clocks.",
]


@pytest.mark.parametrize(
    "link, lines",
    [
        ("[[Heron sync design#Conflicts]]", CONFLICTS),
        ("[[HSD#Storage]]", ["10 | ## Storage", "11 | Postgres 16."]),
        ("[[Heron sync design#Conflicts#Clocks]]", ["8 | ### Clocks", "9 | Hybrid clocks."]),
        ("[[Heron sync design#^lww]]", ["7 | Last writer wins. ^lww"]),
        ("[[projects/heron sync design#^lww|the rule]]", ["7 | Last writer wins. ^lww"]),
    ],
)
def test_get_a_link_prints_its_section_or_block_with_the_file_s_line_numbers(
    linked: Path, link: str, lines: list[str]
) -> None:
    done = cli("get", link, "--vault", str(linked))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == lines


def test_get_a_whole_note_by_its_alias(linked: Path) -> None:
    done = cli("get", "[[HSD]]", "--vault", str(linked), "--raw")
    assert done.returncode == 0 and done.stdout == (linked / DESIGN).read_text()


def test_a_heading_or_block_the_note_lacks_is_one_line_listing_its_headings(linked: Path) -> None:
    heading = memsync("get", "[[Heron sync design#Nope]]", "--vault", str(linked))
    assert heading.returncode == 1 and heading.stdout == ""
    assert heading.stderr.splitlines() == [
        f"memsync: error: {DESIGN} has no heading 'Nope'; its headings: Heron sync design, "
        "Conflicts, Clocks, Storage"
    ]
    block = cli("get", "[[HSD#^nope]]", "--vault", str(linked))
    assert block.returncode == 1
    assert block.stderr == f"memsync: error: {DESIGN} has no block ^nope\n"


def test_status_counts_every_link_and_the_unresolved_ones(linked: Path) -> None:
    facts = json.loads(cli("status", "--vault", str(linked), "--json").stdout)
    assert (facts["links"], facts["unresolved_links"]) == (5, 2)
    text = cli("status", "--vault", str(linked)).stdout
    assert "links:    5 (2 unresolved)" in text.splitlines()


def test_a_reader_of_an_index_from_before_links_says_its_writer_must_index_it(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    """One line naming who brings the links; status leaves their counts out until then."""
    vault, db = older_index(tmp_path, 8)
    write(vault, "log.md", "[[Redis]]\n")
    for args in (["links", "redis.md"], ["links", "--unresolved"], ["get", "[[redis]]"]):
        done = memsync(*args, "--db", str(db))
        assert done.returncode == 1 and done.stdout == "", args
        [line] = done.stderr.splitlines()
        assert "older memsync" in line and "writer must run memsync index or watch" in line
    facts = json.loads(cli("status", "--db", str(db), "--json").stdout)
    assert "links" not in facts and "unresolved_links" not in facts
    assert "links:" not in cli("status", "--db", str(db)).stdout
    indexed_vault(vault, db=db)
    backlinks = cli("links", "[[redis]]", "--db", str(db)).stdout.splitlines()
    assert backlinks[-2:] == ["backlinks: 1", "  log.md:1: [[Redis]]"]
    assert json.loads(cli("status", "--db", str(db), "--json").stdout)["links"] == 1


def test_serve_answers_status_while_it_indexes_megabytes_of_hostile_notes(
    tmp_path: Path,
) -> None:
    """One 60 KB note of backticks froze every request of `serve` for 26 s (the parser's regex
    held the interpreter lock). Each /api/status asked while two such megabytes are indexed
    answers (bench_links --hostile times it), and their links are counted once indexed."""
    vault, port = tmp_path / "notes", free_port()
    write(vault, "tech/ssh.md", "# SSH\n\nThe test server's SSH port is 2222.\n")
    token = Tokens().add("agent")
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    with serve(str(vault), "--listen", f"127.0.0.1:{port}") as process:
        assert _wait_until_served(url, token, process).status_code == 200
        write(vault, "ticks.md", "See [[ssh]] " + "`" * (1 << 20) + "\n")
        write(vault, "brackets.md", "[" + "\\[" * (1 << 19) + "\nSee [the port](tech/ssh.md).\n")
        answers, facts = [], {}
        while facts.get("files_indexed") != 3 and len(answers) < 10_000:
            answer = httpx2.get(f"{url}/api/status", headers=headers, timeout=60)
            answers.append(answer.status_code)
            facts = answer.json()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert set(answers) == {200} and facts["files_indexed"] == 3
    assert (facts["links"], facts["unresolved_links"]) == (2, 0)
