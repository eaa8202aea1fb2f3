"""Related notes on every face: the pure ranking's rules, `memsync related` on a real index (by
keyword only, and with vectors from a real embedding server), and the same answer from MCP over
stdio, /api/related, memory_related over HTTP and the page's note view, from a real server."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner

from memsync import fts
from memsync.cli.commands import main
from memsync.config import load_config
from memsync.search.related import distinctive_words
from memsync.search.vector_side import spread
from memsync.store.protocols import ChunkRow
from memsync.web.tokens import Tokens
from tests.agent.test_mcp import calls
from tests.conftest import EmbeddingServer, VaultIndexer, write
from tests.web.test_serve import PAGE, serving, tool_calls

HERON = "projects/heron.md"


def _vault(root: Path) -> Path:
    write(
        root,
        HERON,
        "# Heron\n\nHeron is the offline sync engine of the mobile app.\n"
        "Conflicts merge with a CRDT, see [[crdt]].\n",
    )
    write(root, "notes/crdt.md", "# CRDT\n\nA CRDT merges conflicts: offline edits sync later.\n")
    write(
        root,
        "people/maya.md",
        "---\ntags: [team]\n---\n# Maya\n\nMaya builds the mobile app and its offline sync.\n",
    )
    write(root, "daily/2026-11-20.md", "# 2026-11-20\n\nMet Maya about [[heron]] sync.\n")
    write(root, "cooking/bread.md", "# Bread\n\nSourdough: flour, water, a starter; hydration.\n")
    write(root, "cooking/pizza.md", "# Pizza\n\nPizza dough: flour, water, yeast; hydration.\n")
    return root


def _run(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def indexed(tmp_path: Path, indexed_vault: VaultIndexer) -> tuple[Path, Path]:
    """The vault indexed by keyword only: (vault, index file)."""
    db = tmp_path / "i.sqlite"
    return indexed_vault(_vault(tmp_path / "notes"), db=db), db


def _related(db: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = _run("related", *args, "--db", str(db), "--json", env=env)
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _paths(answer: dict[str, Any]) -> list[str]:
    return [hit["path"] for hit in answer["results"]]


# -- the rules, pure ---------------------------------------------------------------------------


def test_distinctive_words_are_the_note_s_highest_tf_idf_words_held_by_another_chunk() -> None:
    text = fts.words("Heron heron heron sync sync the the the the xylophone a 2026")
    counts = {"heron": 2, "sync": 5, "the": 100, "xylophone": 1}
    # `the` is in every chunk (idf 0), `xylophone` in this one only, `a` and `2026` no words
    assert distinctive_words(text, counts, 100) == ["heron", "sync"]
    assert distinctive_words(text, counts, 100, size=1) == ["heron"]
    assert distinctive_words([], counts, 100) == []
    # a word in more than a fifth of the chunks tells few notes apart (more-like-this's max_doc_freq)
    assert distinctive_words(text, {**counts, "heron": 21}, 100) == ["sync"]


def test_a_note_in_chinese_is_related_by_its_words_as_the_index_holds_them(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    """A CJK run is its bigrams, as the keyword index spells it: a whole run, as one word,
    is held by no chunk, and a Chinese note found nothing."""
    assert fts.words("项目进度 Heron") == ["项目", "目进", "进度", "heron"]
    db = tmp_path / "i.sqlite"
    notes = {
        "a.md": "# 会议\n\n项目进度会议记录，讨论了同步引擎。\n",
        "b.md": "# 计划\n\n项目进度：同步引擎下周上线。\n",
        "c.md": "# 面包\n\n酸面包需要面粉和水。\n",
    }
    indexed_vault(tmp_path / "notes", notes=notes, db=db)
    assert _paths(_related(db, "a.md")) == ["b.md"]


def test_a_long_note_s_probes_are_spread_from_its_first_chunk_to_its_last() -> None:
    rows = [ChunkRow(i, "a.md", i, i, "", None) for i in range(20)]
    assert [r.id for r in spread(rows, 4)] == [0, 6, 13, 19]
    assert spread(rows[:3], 8) == rows[:3]


# -- the command -------------------------------------------------------------------------------


def test_related_lists_other_notes_sharing_the_note_s_words_best_first_once_each(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    answer = _related(db, HERON)
    assert set(answer) == {"note", "mode", "notices", "results"}
    assert answer["note"] == HERON and answer["mode"] == "keyword"
    assert answer["notices"] == [
        "the index has no vectors (indexed without an embedding model): related by keyword only "
        "(the note's own distinctive words)"
    ]
    paths = _paths(answer)
    assert HERON not in paths and len(paths) == len(set(paths))
    assert {"notes/crdt.md", "people/maya.md"} <= set(paths)
    assert not any(path.startswith("cooking/") for path in paths)
    scores = [hit["score"] for hit in answer["results"]]
    assert scores == sorted(scores, reverse=True) and scores[-1] >= 0.35  # the usual min_score
    top = answer["results"][0]
    assert top["citation"] == f"{top['path']}#L{top['start_line']}-L{top['end_line']}"
    assert top["snippet"] and top["vector_score"] is None and top["text_score"] == top["score"]
    assert _paths(_related(db, "cooking/bread.md")) == ["cooking/pizza.md"]


def test_related_prints_ranked_locations_with_their_lines(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    done = _run("related", "cooking/bread.md", "--db", str(db))
    assert done.exit_code == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("note: the index has no vectors")
    assert lines[1].startswith("1. ") and lines[1].endswith("cooking/pizza.md:1-3")
    assert "Pizza dough: flour, water, yeast; hydration." in done.stdout


def test_related_takes_query_s_filters_and_a_number(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    assert len(_related(db, HERON, "-n", "1")["results"]) == 1
    assert _paths(_related(db, HERON, "--tag", "team")) == ["people/maya.md"]
    assert _paths(_related(db, HERON, "--path", "notes/")) == ["notes/crdt.md"]
    assert _paths(_related(db, HERON, "--until", "2026-11-20")) == ["daily/2026-11-20.md"]
    none = _run("related", HERON, "--db", str(db), "--path", "cooking/")
    assert none.exit_code == 0 and none.stderr.endswith(f"no notes related to {HERON}\n")


def test_related_takes_a_note_as_get_does_and_refuses_as_get_does(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    assert _related(db, "[[crdt]]")["note"] == "notes/crdt.md"
    # the lines asked for are what the others are related to
    assert _paths(_related(db, f"{HERON}:4"))[0] == "notes/crdt.md"
    assert _paths(_related(db, f"{HERON}:3-3"))[0] == "people/maya.md"
    for location in ("nowhere.md", "[[Nowhere]]"):
        got = _run("get", location, "--db", str(db))
        refused = _run("related", location, "--db", str(db))
        assert refused.exit_code == got.exit_code == 1 and refused.stderr == got.stderr
    bad = _run("related", HERON, "--db", str(db), "--since", "someday")
    assert bad.exit_code == 2 and "--since" in bad.stderr


def test_with_vectors_related_is_by_meaning_and_words_and_says_nothing_more(
    tmp_path: Path, embedding_server: EmbeddingServer, indexed_vault: VaultIndexer
) -> None:
    db = tmp_path / "i.sqlite"
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    vault = indexed_vault(_vault(tmp_path / "notes"), db=db, provider="openai", env=env)
    calls_before = len(embedding_server.requests)
    answer = _related(db, HERON, env=env)
    assert len(embedding_server.requests) == calls_before  # from the index: no model runs
    assert answer["mode"] == "hybrid" and answer["notices"] == []
    assert answer["results"] and HERON not in _paths(answer)
    assert all(hit["vector_score"] is not None for hit in answer["results"])
    assert answer["results"][0]["path"] in {"notes/crdt.md", "people/maya.md"}
    # a note saved since: its text is read again before answering, its vectors come later
    write(vault, HERON, "# Heron\n\nHeron syncs offline edits of the mobile app.\n")
    saved = _related(db, HERON, env=env)
    assert saved["mode"] == "keyword" and saved["results"]
    assert saved["notices"] == [
        "the note has no vectors yet (memsync index, or a running watch, embeds it): related by "
        "keyword only (the note's own distinctive words)"
    ]


# -- the other faces ---------------------------------------------------------------------------


def test_mcp_the_api_and_the_cli_give_the_same_related_notes(indexed: tuple[Path, Path]) -> None:
    _, db = indexed
    cli = _related(db, HERON, "-n", "2", "--path", "notes/", "--path", "people/")
    token = Tokens().add("agent")
    arguments = {"note": HERON, "limit": 2, "path": "people/"}
    with serving(load_config(db=str(db)), None) as url:
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx2.get(
            f"{url}/api/related",
            params=[("location", HERON), ("n", "2"), ("path", "notes/"), ("path", "people/")],
            headers=headers,
        )
        tagged = httpx2.get(
            f"{url}/api/related", params={"location": HERON, "tag": "team"}, headers=headers
        )
        over_http = tool_calls(url, token, ("memory_related", arguments))
    assert api.status_code == 200 and api.json() == cli
    assert _paths(tagged.json()) == ["people/maya.md"]
    over_stdio = calls(["--db", str(db)], ("memory_related", arguments))
    assert over_http == over_stdio
    error, text, structured = over_stdio[0]
    assert not error and structured == _related(db, HERON, "-n", "2", "--path", "people/")
    assert text.startswith("note: the index has no vectors") and "people/maya.md#L" in text


@pytest.mark.parametrize("location", ["[[Nowhere]]", "nowhere.md", ""])
def test_a_note_that_names_nothing_is_the_same_message_on_every_face(
    indexed: tuple[Path, Path], location: str
) -> None:
    _, db = indexed
    cli = _run("related", location, "--db", str(db))
    assert cli.exit_code == 1
    message = cli.stderr.strip().removeprefix("memsync: error: ")
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx2.get(f"{url}/api/related", params={"location": location}, headers=headers)
        bad_n = httpx2.get(f"{url}/api/related?location={HERON}&n=0", headers=headers)
        tool = tool_calls(url, token, ("memory_related", {"note": location}))
    assert api.status_code == 400 and api.json() == {"error": message}
    assert bad_n.status_code == 400
    assert bad_n.json() == {"error": "limit must be between 1 and 1000, not 0"}
    assert tool[0][0] and message in tool[0][1]


def test_api_links_is_links_json_and_the_note_view_lists_related_notes_and_links(
    indexed: tuple[Path, Path],
) -> None:
    _, db = indexed
    links = _run("links", HERON, "--db", str(db), "--json")
    refused = _run("links", "nowhere.md", "--db", str(db))
    token = Tokens().add("agent")
    with serving(load_config(db=str(db)), None) as url:
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx2.get(f"{url}/api/links", params={"location": HERON}, headers=headers)
        named = httpx2.get(f"{url}/api/links", params={"location": "[[heron]]"}, headers=headers)
        nowhere = httpx2.get(f"{url}/api/links?location=nowhere.md", headers=headers)
        view = httpx2.get(f"{url}{PAGE}/note?location={urllib.parse.quote(HERON)}", headers=headers)
    assert api.status_code == 200 and api.json() == json.loads(links.stdout)
    assert named.json() == api.json()
    assert refused.exit_code == 1 and nowhere.status_code == 400
    assert nowhere.json() == {"error": refused.stderr.strip().removeprefix("memsync: error: ")}
    assert view.status_code == 200
    related, rest = view.text.split('<section class="links">')
    assert "<h2>Related notes</h2>" in related and "notes/crdt.md:1-3" in related
    assert "cooking/" not in related
    links_part, backlinks_part = rest.split("<h2>Backlinks</h2>")
    assert "[[crdt]]" in links_part and "note?location=notes%2Fcrdt.md" in links_part
    assert "daily/2026-11-20.md:3" in backlinks_part and "Met Maya about [[heron]] sync." in (
        backlinks_part
    )
