"""The search page: its pure renderers, and its routes in the real `memsync serve` app over a
real indexed vault (Starlette's TestClient, with a token; tests/web/test_page_browser.py drives the
page of a running `memsync serve` in a real Chromium)."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memsync.agent.server import MemoryServer
from memsync.config import Config, load_config
from memsync.memory import Memory, index
from memsync.web import page
from memsync.web.app import make_app
from memsync.web.page_routes import POLICY, notice
from memsync.web.tokens import Tokens
from tests.conftest import SAMPLE_VAULT, write

MARKUP = "A note with <script>alert(1)</script> and <b>bold</b> in it."
PAGE = "/Pp1dlmLNaWqTNJ-Yt0mG2w"  # the page's folder: the client's addresses are relative to it


def indexed_sample(folder: Path) -> Config:
    """sample_vault and a note holding markup, indexed keyword-only in `folder`."""
    vault = folder / "vault"
    shutil.copytree(SAMPLE_VAULT, vault)
    write(vault, "markup.md", f"# Markup\n\n{MARKUP}\n")
    config = load_config(db=str(folder / "index" / "i.sqlite"), provider="none")
    index(config, vault)
    return config


@contextlib.contextmanager
def page_client(config: Config) -> Iterator[TestClient]:
    """The real `memsync serve` app over the index of `config`, and a client with a token, whose
    addresses ("/", "/note") are the page's, in its folder."""
    server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, (), 2)
    hosts = frozenset({"testserver"})
    app = make_app(server, Tokens(), hosts=hosts, cookie="memsync", tls=False, slots=2, prefix=PAGE)
    headers = {"Authorization": f"Bearer {Tokens().add('page')}"}
    base = f"http://testserver{PAGE}/"
    try:
        with TestClient(app, base_url=base, headers=headers, follow_redirects=False) as client:
            yield client
    finally:
        server.close()


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return indexed_sample(tmp_path)


@pytest.fixture
def client(config: Config) -> Iterator[TestClient]:
    with page_client(config) as client:
        yield client


def _hit(**fields: Any) -> dict[str, Any]:
    return {
        "path": "notes/a.md",
        "start_line": 3,
        "end_line": 5,
        "score": 0.876,
        "vector_score": None,
        "text_score": 0.876,
        "snippet": "the redis port\n<i>6380</i>",
        "snippet_start_line": 4,
        "exact_match": False,
        **fields,
    }


def _result(*hits: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "query": "redis",
        "mode": "hybrid",
        "requested_mode": "hybrid",
        "notices": [],
        "results": list(hits),
        **fields,
    }


STATUS = {
    "files_indexed": 80,
    "model": "multilingual-e5-small-q4",
    "chunks_pending": 219,
    "writer": None,
    "last_sync_age_s": 4.0,
}


# -- the pure renderers --------------------------------------------------------------------------


def test_a_result_shows_its_location_score_and_numbered_lines_with_the_words_marked() -> None:
    html = page.search_page(page.Form(q="redis"), "", _result(_hit()), ["redis"])
    assert '<a href="note?location=notes%2Fa.md%3A3-5#L3">notes/a.md:3-5</a>' in html
    assert '<span class="score">0.88</span> <span class="legs">keyword 0.88</span>' in html
    assert '<span class="n">4</span> the <mark>redis</mark> port' in html
    assert '<span class="n">5</span> &lt;i&gt;6380&lt;/i&gt;' in html
    assert "<title>redis - memsync</title>" in html


def test_every_text_from_a_note_or_a_request_is_escaped() -> None:
    evil = '"><script>alert(1)</script>'
    hit = _hit(path=f"{evil}.md", snippet=evil)
    html = page.search_page(page.Form(q=evil, paths=(evil,), tags=(evil,)), "", _result(hit), [])
    assert "<script>" not in html and '"><script' not in html
    assert html.count("&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") == 6  # all but the href
    lines = {
        "path": f"{evil}.md",
        "start_line": 1,
        "end_line": 1,
        "text": evil,
        "copy": evil,
        "note": evil,
    }
    assert "<script>" not in page.note_page(evil, lines, 1, 1)
    assert "<script>" not in page.note_page(evil, None, None, None, error=evil)
    assert "<script>" not in page.status_line(None, evil)


def test_control_characters_in_a_note_show_as_escapes() -> None:
    html = page.search_page(page.Form(q="x"), "", _result(_hit(path="a\x1b.md", snippet="b\x07")))
    assert "a\\x1b.md:3-5" in html and "b\\x07" in html and "\x1b" not in html


def test_the_mode_that_ran_notices_and_no_results_are_said() -> None:
    result = _result(mode="keyword", notices=["vector search unavailable"])
    html = page.search_page(page.Form(q="redis"), "", result)
    assert "ran keyword search; hybrid was asked for" in html
    assert '<p class="notice">note: vector search unavailable</p>' in html
    assert "No notes match &#x27;redis&#x27;." in html


def test_the_form_keeps_what_was_typed_and_each_path_in_a_field_of_its_own() -> None:
    form = page.form_of(
        [
            ("q", "a b"),
            ("path", "projects/"),
            ("path", " "),
            ("path", "daily/*.md"),
            ("since", " 7d "),
            ("until", ""),
            ("tag", "ops, project/heron"),
            ("tag", "x"),
            ("mode", "keyword"),
        ]
    )
    assert form == page.Form(
        "a b", ("projects/", "daily/*.md"), "7d", "", ("ops, project/heron", "x"), "keyword"
    )
    assert form.search_args() == {
        "paths": ["projects/", "daily/*.md"],
        "since": "7d",
        "until": None,
        "tags": ["ops, project/heron", "x"],  # split where every face's tags are
        "mode": "keyword",
    }
    html = page.search_page(form, "")
    assert 'name="path" value="projects/"' in html and 'name="path" value="daily/*.md"' in html
    assert 'name="tag" value="ops, project/heron x"' in html
    assert '<option value="keyword" selected>' in html
    assert '<ol class="results">' not in html  # no search yet: the form alone


def test_the_status_line_says_notes_chunks_waiting_writer_and_last_sync_once() -> None:
    line = page.status_line(STATUS)
    assert line == (
        '<p class="status">80 notes indexed · 219 chunks waiting for vectors · '
        "writer: no watcher running · last sync 4s ago</p>\n"
    )
    writer = {"role": "watch", "pid": 7, "host": "nas", "last_sync": time.time() - 4}
    with_writer = page.status_line({**STATUS, "writer": writer})
    assert "writer: memsync watch running (pid 7 on nas) · last sync 4s ago" in with_writer
    assert with_writer.count("last sync") == 1
    keyword_only = page.status_line({**STATUS, "model": None})  # made with --provider none
    assert "80 notes indexed · keyword search only · writer:" in keyword_only


def test_the_note_view_numbers_every_line_and_marks_the_located_ones() -> None:
    lines = {
        "path": "a.md",
        "start_line": 1,
        "end_line": 3,
        "text": "one\ntwo\nthree",
        "copy": None,
        "note": None,
    }
    html = page.note_page("a.md:2-3", lines, 2, 3)
    assert '<span id="L1" class="line"><a class="n" href="#L1">1</a> one\n</span>' in html
    assert '<span id="L2" class="line hit">' in html and '<span id="L3" class="line hit">' in html
    empty = {**lines, "end_line": 0, "text": ""}
    assert "a.md is empty." in page.note_page("a.md", empty, None, None)


def test_the_stylesheet_link_changes_with_its_bytes() -> None:
    href = page.asset_href("page.css")
    assert href.startswith("assets/page.css?v=") and len(href) == len("assets/page.css?v=") + 12
    assert f'<link rel="stylesheet" href="{href}">' in page.notice_page("t", "m")


# -- the routes over a real index ----------------------------------------------------------------


def _strict(response: Any, referrer: str = "no-referrer") -> None:
    assert response.headers["content-security-policy"] == POLICY
    assert "default-src 'none'" in POLICY and "frame-ancestors 'none'" in POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == referrer
    assert response.headers["content-type"] == "text/html; charset=utf-8"


def _locations(html: str) -> list[str]:
    return re.findall(r'<p class="where"><a href="[^"]*">([^<]*)</a>', html)


def test_the_page_searches_the_index_with_its_filters(client: TestClient) -> None:
    everything = _locations(client.get("/", params={"q": "postgres"}).text)
    assert "tech/postgres-replication.md:1-11" in everything
    asked = {"q": "postgres", "path": "daily/", "until": "2026-10-15", "mode": "keyword"}
    answer = client.get("/", params=asked)
    assert answer.status_code == 200
    _strict(answer)
    assert _locations(answer.text) == ["daily/2026-10-02.md:1-7", "daily/2026-10-02.md:8-9"]
    tagged = _locations(client.get("/", params={"q": "postgres", "tag": "incident"}).text)
    assert {where.partition(":")[0] for where in tagged} == {
        "daily/2026-10-21.md",
        "daily/2026-11-10.md",
    }
    assert "keyword search only" in answer.text and "notes indexed" in answer.text  # provider none


def test_a_note_holding_markup_shows_it_as_text(client: TestClient) -> None:
    found = client.get("/", params={"q": "bold script"}).text
    assert "&lt;b&gt;<mark>bold</mark>&lt;/b&gt;" in found and "<script>" not in found
    note = client.get("/note", params={"location": "markup.md:3-3"})
    assert note.status_code == 200
    _strict(note)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; and &lt;b&gt;bold&lt;/b&gt;" in note.text
    assert '<span id="L3" class="line hit">' in note.text


def test_a_bad_filter_or_mode_is_shown_with_the_clis_message_and_400(client: TestClient) -> None:
    bad_date = client.get("/", params={"q": "redis", "since": "someday"})
    assert bad_date.status_code == 400
    _strict(bad_date)
    assert "memsync: error: --since: &#x27;someday&#x27; is not a date" in bad_date.text
    assert 'name="since" value="someday"' in bad_date.text  # the form keeps it to correct
    bad_mode = client.get("/", params={"q": "redis", "mode": "fast"})
    assert bad_mode.status_code == 400 and "unknown mode &#x27;fast&#x27;" in bad_mode.text


def test_an_empty_query_shows_the_form_and_the_status_only(client: TestClient) -> None:
    answer = client.get("/", params={"q": "  ", "since": "7d"})
    assert answer.status_code == 200 and "error" not in answer.text
    assert '<ol class="results">' not in answer.text and "notes indexed" in answer.text


def test_a_location_outside_the_vault_or_no_note_is_refused_on_the_page(
    client: TestClient,
) -> None:
    for location in ("../etc/passwd", "nowhere.md:1-2"):
        answer = client.get("/note", params={"location": location})
        assert answer.status_code == 400, location
        _strict(answer)
        assert '<p class="error" role="alert">memsync: error: ' in answer.text


def test_the_stylesheet_is_served_by_memsync_and_cached_for_good(client: TestClient) -> None:
    answer = client.get(page.asset_href("page.css"))
    assert answer.status_code == 200 and answer.content == page.ASSETS["page.css"]
    assert answer.headers["content-type"].startswith("text/css")
    assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert client.get("/assets/other.js").status_code == 404


def test_without_a_token_the_page_is_a_401_with_a_login_form(config: Config) -> None:
    with page_client(config) as client:
        token = client.headers["Authorization"].removeprefix("Bearer ")
        client.headers.pop("Authorization")
        for url in ("/", "/?q=redis", "/note?location=markup.md:3"):
            refused = client.get(url)
            assert refused.status_code == 401, url
            _strict(refused, referrer="same-origin")  # its POST names its origin, not "null"
            assert "<h1>Log in</h1>" in refused.text and 'name="token"' in refused.text
            assert "alert(1)" not in refused.text
        # the login page's own stylesheet: the same bytes for everyone, needing no token
        assert client.get(page.asset_href("page.css")).status_code == 200
        assert client.post(page.asset_href("page.css")).status_code == 401
        login = client.get(f"/login?token={token}&q=redis")
        assert login.status_code == 303 and login.headers["location"] == f"{PAGE}/?q=redis"
        assert client.get("/?q=redis").status_code == 200  # the session cookie


def test_the_login_page_has_a_form_posting_a_token_and_no_backticks() -> None:
    html = page.login_page("the token is not valid (revoked, or mistyped).")
    assert '<form class="login" method="post" action="login">' in html
    assert '<input type="password" name="token"' in html and "<button" in html
    assert '<p class="error" role="alert">the token is not valid' in html
    assert "`" not in html and "<code>memsync token add NAME</code>" in html
    assert '<link rel="stylesheet"' in html and '<p class="error"' not in page.login_page("")


def test_a_notice_outside_the_page_s_folder_links_nothing() -> None:
    html = page.notice_page("Not Found", "elsewhere", styled=False)
    assert "<link" not in html and "href" not in html and "<h1>Not Found</h1>" in html


def test_nothing_at_an_address_is_a_404_page_with_the_same_strict_policy(
    client: TestClient,
) -> None:
    answer = client.get("/nothing/<b>here")
    assert answer.status_code == 404
    _strict(answer)
    assert "<h1>Not Found</h1>" in answer.text and "/nothing/&lt;b&gt;here" in answer.text


def test_a_notice_is_a_short_page_with_the_same_strict_policy() -> None:
    answer = notice(401, "Log in", "open <the address> memsync serve printed", {"X-A": "b"})
    assert answer.status_code == 401 and answer.headers["x-a"] == "b"
    _strict(answer)
    assert b"<h1>Log in</h1>" in answer.body
    assert b"open &lt;the address&gt; memsync serve printed" in answer.body
