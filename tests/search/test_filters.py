"""Filters by path, date and tag: inside both legs, before the top k, in every mode."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path

import pytest

from memsync.filters import note_filter
from memsync.search.options import Options
from memsync.search.pipeline import search
from memsync.store.locate import Location
from memsync.store.protocols import StoreWriter as Store
from memsync.store.sqlite_store import SqliteStore
from memsync.sync.syncer import index_vault
from tests.conftest import HashEmbedder, write

MB = 1 << 20
TODAY = date(2026, 11, 30)


def _vault(root: Path) -> Path:
    write(root, "daily/2026-11-28.md", "# 2026-11-28\n\nheron deploy went fine #incident/minor\n")
    write(root, "daily/2026-11-02.md", "# 2026-11-02\n\nheron deploy rolled back #incident/major\n")
    write(root, "daily/2026-10-01.md", "# 2026-10-01\n\nheron planning, no deploy\n")
    write(
        root,
        "projects/heron.md",
        "---\ntitle: Heron\ntags: [project/heron, ops]\ndate: 2026-06-01\n---\nheron deploy plan\n",
    )
    write(root, "projects/kestrel.md", "---\ntags: [project/kestrel]\n---\nkestrel deploy plan\n")
    write(root, "笔记/部署.md", "# 部署\n\n部署流程 heron deploy #运维\n")
    write(root, "broken.md", "---\ntags: [unclosed\n---\nheron deploy notes #rescued\n")
    old = datetime(2025, 1, 1, 12).timestamp()  # undated notes are dated by mtime: make it fixed
    for note in root.rglob("*.md"):
        os.utime(note, (old, old))
    return root


@pytest.fixture
def store(tmp_path: Path, location: Location) -> Iterator[Store]:
    root = _vault(tmp_path / "v")
    with location.open(create=True) as s:
        index_vault(s, root, MB, HashEmbedder())
        yield s


def _paths(store: Store, text: str, mode: str, **filters: object) -> list[str]:
    options = Options(
        mode=mode,
        min_score=0.0,
        limit=20,
        only=note_filter(today=TODAY, **filters),  # type: ignore[arg-type]
    )
    outcome = search(store, text, options, HashEmbedder())
    return sorted({hit.path for hit in outcome.results})


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid", "rrf"])
def test_each_filter_alone_and_combined_in_every_mode(store: Store, mode: str) -> None:
    assert _paths(store, "heron deploy", mode, paths=["projects/"]) == [
        "projects/heron.md",
        "projects/kestrel.md",
    ]
    assert _paths(store, "heron deploy", mode, paths=["daily/2026-11-*.md"]) == [
        "daily/2026-11-02.md",
        "daily/2026-11-28.md",
    ]
    assert _paths(store, "heron deploy", mode, since="7d") == ["daily/2026-11-28.md"]
    assert _paths(store, "heron deploy", mode, until="2025-01-01") == [
        "broken.md",
        "projects/kestrel.md",
        "笔记/部署.md",
    ]
    assert _paths(store, "heron deploy", mode, since="2026-11-01", until="2026-11-27") == [
        "daily/2026-11-02.md"
    ]
    assert _paths(store, "heron deploy", mode, tags=["incident"]) == [
        "daily/2026-11-02.md",
        "daily/2026-11-28.md",
    ]
    assert _paths(store, "heron deploy", mode, tags=["#Incident/Major"]) == ["daily/2026-11-02.md"]
    assert _paths(store, "heron deploy", mode, tags=["project"]) == [
        "projects/heron.md",
        "projects/kestrel.md",
    ]
    assert _paths(store, "heron deploy", mode, tags=["heron"]) == []  # never the last part alone
    assert _paths(store, "heron deploy", mode, tags=["project", "ops"]) == ["projects/heron.md"]
    assert _paths(store, "heron deploy", mode, tags=["incident"], since="7d") == [
        "daily/2026-11-28.md"
    ]
    assert _paths(store, "heron deploy", mode, tags=["rescued"]) == ["broken.md"]
    assert _paths(store, "部署", mode, tags=["运维"]) == ["笔记/部署.md"]


def _dated(store: Store, day: str) -> list[str]:
    return _paths(store, "deploy planning", "keyword", since=day, until=day)


def test_front_matter_dates_and_warnings_are_stored(store: Store) -> None:
    assert _dated(store, "2026-06-01") == ["projects/heron.md"]
    assert _dated(store, "2026-10-01") == ["daily/2026-10-01.md"]
    assert [p for p, _ in store.file_warnings()] == ["broken.md"]


@pytest.mark.parametrize("kept", ["keep/", "other*"])
def test_a_filtered_query_ranks_exactly_as_the_unfiltered_one_does(
    tmp_path: Path, location: Location, kept: str
) -> None:
    """The filter keeps 1% of the chunks (a scan of those), or 99% (where pgvector scans its
    graph iteratively); a brute-force reference ranks every chunk unfiltered and keeps the
    ones that pass: the filtered top k must be its first k, in order."""
    rng = random.Random(3)
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    root = tmp_path / "v"
    for i in range(600):
        folder = "keep" if i % 100 == 0 else f"other{i % 7}"
        body = " ".join(rng.choice(words) for _ in range(30))
        write(root, f"{folder}/n{i}.md", f"# Note {i}\n\n{body} sierra\n")
    embedder = HashEmbedder()
    with location.open(create=True) as store:
        index_vault(store, root, MB, embedder)
        for mode in ("keyword", "vector", "hybrid"):
            base = Options(mode=mode, min_score=0.0)
            full = search(store, "sierra alpha", replace(base, limit=1000), embedder)
            only = note_filter(paths=[kept])
            reference = [
                (h.path, round(h.score, 6))
                for h in full.results
                if h.path.startswith(kept.rstrip("*"))
            ]
            filtered = search(store, "sierra alpha", replace(base, limit=4, only=only), embedder)
            got = [(h.path, round(h.score, 6)) for h in filtered.results]
            # the same scores in the same order; among equal scores any of the tied chunks
            assert [score for _, score in got] == [score for _, score in reference[:4]], mode
            assert set(got) <= set(reference), mode


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_thousand_path_or_tag_filters_search_as_a_few_do(store: Store, mode: str) -> None:
    """Each kind of filter is one argument however many there are: a chain of a thousand
    conditions was an expression tree too deep for SQLite."""
    elsewhere = [f"elsewhere-{n}/" for n in range(999)]
    assert _paths(store, "heron deploy", mode, paths=[*elsewhere, "projects/"]) == [
        "projects/heron.md",
        "projects/kestrel.md",
    ]
    assert _paths(store, "heron deploy", mode, paths=elsewhere) == []
    assert _paths(store, "heron deploy", mode, tags=[f"tag-{n}" for n in range(1000)]) == []
    assert _paths(store, "heron deploy", mode, tags=["project", "ops", "project/heron"]) == [
        "projects/heron.md"
    ]


def test_a_thousand_filters_answer_through_the_cli_the_http_api_and_mcp(
    indexed: tuple[Path, Path],
) -> None:
    """Through a real process's CLI, a real server's JSON API and the MCP SDK's client."""
    import httpx
    from click.testing import CliRunner

    from memsync.cli.commands import main
    from memsync.config import load_config
    from memsync.web.tokens import Tokens
    from tests.agent.test_mcp import calls
    from tests.web.test_serve import serving

    _, db = indexed
    elsewhere = [f"elsewhere-{n}/" for n in range(999)]
    unknown = [f"tag-{n}" for n in range(1000)]
    tech = ["tech/redis.md", "tech/ssh.md"]

    def found(results: list[dict[str, object]]) -> list[object]:
        return sorted({hit["path"] for hit in results})

    def cli(flag: str, values: list[str]) -> list[object]:
        flags = [part for value in values for part in (flag, value)]
        ask = ["query", "port", "--db", str(db), "--min-score", "0", "--json", *flags]
        done = CliRunner().invoke(main, ask)
        assert done.exit_code == 0, done.output
        return found(json.loads(done.stdout)["results"])

    assert cli("--path", [*elsewhere, "tech/"]) == tech
    assert cli("--tag", unknown) == []
    token = Tokens().add("filters")
    with serving(load_config(db=str(db)), None) as url:

        def api(name: str, values: list[str]) -> list[object]:
            asked = [("q", "port"), ("min_score", "0"), *((name, value) for value in values)]
            answer = httpx.get(
                f"{url}/api/search", params=asked, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 200, answer.text
            return found(answer.json()["results"])

        assert api("path", [*elsewhere, "tech/"]) == tech
        assert api("tag", unknown) == []
    (e1, _, none), (e2, _, some) = calls(
        ["--db", str(db)],
        ("memory_search", {"query": "port", "min_score": 0, "tags": unknown}),
        ("memory_search", {"query": "port", "min_score": 0, "tags": ["ops", "ops/network"] * 500}),
    )
    assert not e1 and none["results"] == []
    assert not e2 and found(some["results"]) == ["ops/runbook.md"]


def test_vectors_in_memory_filter_like_sqlite_vec(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "i.sqlite")
    index_vault(store, _vault(tmp_path / "v"), MB, HashEmbedder())
    options = Options(mode="vector", min_score=0.0, only=note_filter(tags=["project"]))
    on_disk = [h.path for h in search(store, "deploy plan", options, HashEmbedder()).results]
    store.vectors_in_memory = True
    in_memory = [h.path for h in search(store, "deploy plan", options, HashEmbedder()).results]
    assert on_disk == in_memory and set(on_disk) == {"projects/heron.md", "projects/kestrel.md"}


def test_a_touch_moves_the_date_of_a_note_dated_by_its_mtime(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "v"
    old = datetime(2025, 1, 2, 12).timestamp()
    os.utime(root / "projects/kestrel.md", (old, old))
    index_vault(store, root, MB, HashEmbedder())
    assert _dated(store, "2025-01-02") == ["projects/kestrel.md"]
    assert _dated(store, "2026-06-01") == ["projects/heron.md"]  # front matter beats any mtime
