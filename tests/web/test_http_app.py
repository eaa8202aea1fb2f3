"""`memsync serve`'s routes and door, in this process (Starlette's TestClient): the API's answers
are the CLI's, and every refusal (Host, Origin, no token, a revoked one, a large body, a bad
value) is one short answer with no trace."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from mcp.server.mcpserver.exceptions import ToolError
from starlette.testclient import TestClient

from memsync.agent.server import MemoryServer
from memsync.cli.commands import main
from memsync.config import load_config
from memsync.memory import Memory
from memsync.web.app import MAX_BODY, make_app
from memsync.web.guard import MAX_SESSIONS, SESSION_IDLE, Sessions
from memsync.web.listen import cookie_name
from memsync.web.tokens import Token, Tokens
from tests.conftest import EmbeddingServer, VaultIndexer

COOKIE = cookie_name(8631)
PAGE = "/Pp1dlmLNaWqTNJ-Yt0mG2w"  # the page's folder (prefix.py makes one per installation)


@dataclass
class Site:
    client: TestClient
    tokens: Tokens
    reader: str  # a read token
    db: Path

    def get(self, url: str, token: str | None = None, **headers: str) -> object:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.client.get(url, headers=headers)


THREE_NOTES = {
    "MEMORY.md": "# MEMORY\n\n- Coffee: flat white with oat milk.\n",
    "tech/redis.md": "# Redis\n\nThe staging Redis listens on port 6380.\n",
    "daily/2026-11-02.md": "---\ntags: [ops]\n---\n# Monday\n\nRedis restarted.\n",
}


def _notes(tmp_path: Path, provider: str, env: dict[str, str] | None = None) -> Path:
    """Three notes indexed by `provider`: the index file."""
    db = tmp_path / "i.sqlite"
    VaultIndexer(tmp_path)(tmp_path / "notes", notes=THREE_NOTES, db=db, provider=provider, env=env)
    return db


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with serving(_notes(tmp_path, "none")) as served:
        yield served


@contextlib.contextmanager
def serving(db: Path) -> Iterator[Site]:
    config = load_config(db=str(db))
    server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, (), 2)
    tokens = Tokens()
    reader = tokens.add("reader")
    hosts = frozenset({"testserver", "127.0.0.1", "localhost"})
    app = make_app(server, tokens, hosts=hosts, cookie=COOKIE, tls=False, slots=2, prefix=PAGE)
    try:
        with TestClient(app, follow_redirects=False) as client:
            yield Site(client, tokens, reader, db)
    finally:
        server.close()


def _cli_json(*args: str) -> object:
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_search_get_and_status_answer_as_the_cli_prints(site: Site) -> None:
    query = "/api/search?q=redis+port&n=3&mode=keyword&path=tech/&min_score=0"
    answer = site.get(query, site.reader)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    cli = _cli_json(
        "query", "redis port", "--db", str(site.db), "-n", "3", "--mode", "keyword",
        "--path", "tech/", "--min-score", "0", "--json",
    )  # fmt: skip
    assert answer.json() == cli
    tagged = site.get("/api/search?q=redis&mode=keyword&tag=ops&decay=yes&mmr=0", site.reader)
    assert [hit["path"] for hit in tagged.json()["results"]] == ["daily/2026-11-02.md"]
    lines = site.get("/api/get?location=tech/redis.md:3", site.reader).json()
    assert lines["path"] == "tech/redis.md" and lines["start_line"] == lines["end_line"] == 3
    assert lines["text"] == "The staging Redis listens on port 6380." and lines["copy"] is None
    status = site.get("/api/status", site.reader).json()
    assert status["chunks"] == _cli_json("status", "--db", str(site.db), "--json")["chunks"]


def test_api_status_reports_the_index_s_vector_backend_as_status_json_does(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    """The server's own copy of the vectors is a key of its own, not another backend."""
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    db = _notes(tmp_path, "openai", env=env)
    cli = _cli_json("status", "--db", str(db), "--json")
    with serving(db) as site:
        api = site.get("/api/status", site.reader).json()
    assert api["vector_backend"] == cli["vector_backend"]
    assert cli["vector_backend"].startswith("sqlite-vec ")
    assert api["vectors_in_memory"] is True and cli["vectors_in_memory"] is False
    shown = CliRunner().invoke(main, ["status", "--db", str(db)]).stdout
    assert f"vectors:  {cli['vector_backend']}\n" in shown


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("/api/search?q=x&n=5000", "limit must be between 1 and 1000, not 5000"),
        ("/api/search?q=x&n=many", "setting limit: cannot read 'many'"),
        ("/api/search?q=x&mode=psychic", "unknown mode 'psychic'"),
        ("/api/search?q=x&decay=perhaps", "setting decay: cannot read 'perhaps'"),
        ("/api/search?q=x&since=someday", "since"),
        ("/api/search?q=", "the query is empty"),
        ("/api/search?q=" + "word " * 400, "(at most 1,000)"),
        ("/api/get?location=../etc/passwd", ".."),
        ("/api/get", "give a note: PATH"),
        ("/api/get?location=nothing.md", "no note at nothing.md"),
    ],
)
def test_a_bad_value_is_a_400_with_the_cli_s_message(site: Site, query: str, message: str) -> None:
    answer = site.get(query, site.reader)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"] and "\n" not in answer.json()["error"]


def test_without_a_valid_token_the_api_says_401_and_the_page_shows_a_login_form(
    site: Site,
) -> None:
    for token in (None, "memsync_nothing", "not-even-ours"):
        answer = site.get("/api/status", token)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert "memsync token add" in answer.json()["error"]
    page = site.get(f"{PAGE}/")
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert '<form class="login" method="post" action="login">' in page.text
    assert 'type="password" name="token"' in page.text and "`" not in page.text
    assert "<code>memsync token add NAME</code>" in page.text
    assert site.client.get("/mcp", headers={"Authorization": "Basic eDp5"}).status_code == 401


def test_outside_the_page_s_folder_nothing_is_shown_and_the_folder_never_named(
    site: Site,
) -> None:
    """The folder is what keeps the session cookie from other servers on this host: nobody
    without a token learns it, and a token alone shows no page outside it."""
    answers = [
        site.get("/"),
        site.get("/", site.reader),
        site.get(f"/?token={site.reader}"),
        site.get(f"/login?token={site.reader}"),
        site.get("/note?location=tech/redis.md:3", site.reader),
        site.get("/assets/page.css"),
        site.get(PAGE[:-1] + "/"),
        site.get(f"{PAGE}/", host="attacker.example"),
        site.get(f"{PAGE}/?token={site.reader}"),
        site.get(f"{PAGE}/login?token=memsync_wrong"),
        site.client.post(f"{PAGE}/login", data={"token": "memsync_wrong"}),
    ]
    assert [answer.status_code for answer in answers] == [404] * 7 + [403, 401, 401, 401]
    for answer in answers:
        assert "Redis" not in answer.text and "set-cookie" not in answer.headers
    for answer in answers[:7]:
        assert PAGE[1:] not in answer.text and "location" not in answer.headers
        assert '<link rel="stylesheet"' not in answer.text  # it lives in the folder too
    assert "the address memsync serve printed" in answers[0].text


def test_the_login_address_opens_a_session_in_the_page_s_folder_and_drops_the_token(
    site: Site,
) -> None:
    answer = site.get(f"{PAGE}/login?token={site.reader}&q=redis")
    assert answer.status_code == 303 and answer.headers["location"] == f"{PAGE}/?q=redis"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and site.reader not in cookie
    assert f"Path={PAGE}/" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Secure" not in cookie
    page = site.client.get(f"{PAGE}/?q=redis")  # the client keeps the cookie
    assert page.status_code == 200 and "tech/redis.md:1-3" in page.text
    site.tokens.revoke("reader")
    ended = site.client.get(f"{PAGE}/")
    assert ended.status_code == 401 and "session ended" in ended.text
    assert f'{COOKIE}=""; expires=' in ended.headers["set-cookie"]
    assert f"Path={PAGE}/" in ended.headers["set-cookie"]
    assert site.client.get(f"{PAGE}/login?token={site.reader}").status_code == 401


def test_a_cookie_another_server_set_under_the_same_name_logs_nobody_out(site: Site) -> None:
    """Cookies ignore ports: any other server of this host may set one of the session's name for
    "/", which the browser sends beside the page's own; the page's own still opens the page."""
    session = site.get(f"{PAGE}/login?token={site.reader}").cookies[COOKIE]
    site.client.cookies.clear()
    for header in (f"{COOKIE}={session}; {COOKIE}=tossed", f"{COOKIE}=tossed; {COOKIE}={session}"):
        answer = site.client.get(f"{PAGE}/?q=redis", headers={"Cookie": header})
        assert answer.status_code == 200 and "tech/redis.md:1-3" in answer.text
    tossed = site.client.get(f"{PAGE}/", headers={"Cookie": f"{COOKIE}=tossed; {COOKIE}="})
    assert tossed.status_code == 401 and "session ended" in tossed.text


def test_the_login_redirects_only_to_the_page_whatever_address_carries_the_token(
    site: Site,
) -> None:
    """It was an open redirect: //evil.example/?token=VALID answered 303 to //evil.example/."""
    for address in (
        f"//evil.example/?token={site.reader}",
        f"//evil.example/login?token={site.reader}",
        f"/%2F%2Fevil.example/?token={site.reader}",
        f"{PAGE}//evil.example/?token={site.reader}",
        f"{PAGE}/login/..//evil.example?token={site.reader}",
    ):
        answer = site.client.get(f"http://testserver{address}")
        assert answer.status_code in (401, 404), address
        assert "location" not in answer.headers and "set-cookie" not in answer.headers
    login = site.get(f"{PAGE}/login?token={site.reader}&next=//evil.example/")
    assert login.status_code == 303
    assert login.headers["location"] == f"{PAGE}/?next=%2F%2Fevil.example%2F"


def test_the_folder_without_its_slash_leads_to_the_page(site: Site) -> None:
    answer = site.get(PAGE)
    assert answer.status_code == 308 and answer.headers["location"] == f"{PAGE}/"


def test_the_login_form_posts_a_token_in_its_body_only_and_from_this_site_only(
    site: Site,
) -> None:
    form = site.get(f"{PAGE}/login")
    assert form.status_code == 200 and 'name="token"' in form.text
    in_query = site.client.post(f"{PAGE}/login?token={site.reader}")
    assert in_query.status_code == 401 and "set-cookie" not in in_query.headers
    foreign = site.client.post(
        f"{PAGE}/login", data={"token": site.reader}, headers={"Origin": "http://127.0.0.1:9"}
    )
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers
    large = site.client.post(f"{PAGE}/login", data={"token": site.reader, "x": "y" * 5000})
    assert large.status_code == 413 and "set-cookie" not in large.headers
    wrong = site.client.post(f"{PAGE}/login", data={"token": "memsync_wrong"})
    assert wrong.status_code == 401 and "not valid" in wrong.text and 'name="token"' in wrong.text
    posted = site.client.post(
        f"{PAGE}/login", data={"token": site.reader}, headers={"Origin": "http://testserver"}
    )
    assert posted.status_code == 303 and posted.headers["location"] == f"{PAGE}/"
    assert f"Path={PAGE}/" in posted.headers["set-cookie"]
    assert site.client.get(f"{PAGE}/").status_code == 200


@pytest.mark.parametrize("address", ["/", "/note", "/a/b", "/a/b/c/"])
def test_the_login_form_at_any_address_in_the_folder_posts_to_its_login(
    site: Site, address: str
) -> None:
    """An address deeper in the folder shows the form too: it must post where the login is."""
    shown = site.get(f"{PAGE}{address}")
    assert shown.status_code == 401
    action = re.search(r'<form class="login" method="post" action="([^"]+)"', shown.text)
    assert action is not None
    target = urllib.parse.urljoin(f"http://testserver{PAGE}{address}", action.group(1))
    assert target == f"http://testserver{PAGE}/login"


def test_a_session_cookie_replayed_at_the_api_or_mcp_is_refused(site: Site) -> None:
    """Agents send Bearer: a browser's session, taken elsewhere, reads and writes nothing."""
    site.get(f"{PAGE}/login?token={site.reader}")
    session = site.client.cookies[COOKIE]
    replayed = {"Cookie": f"{COOKIE}={session}", "Origin": "http://testserver"}
    assert site.client.get(f"{PAGE}/", headers=replayed).status_code == 200  # it is valid
    site.client.cookies.clear()
    search = site.client.get("/api/search?q=redis", headers=replayed)
    assert search.status_code == 401 and "Bearer" in search.json()["error"]
    mcp = site.client.post("/mcp", json={}, headers=replayed)
    assert mcp.status_code == 401 and "Redis" not in search.text + mcp.text


def test_a_session_unused_for_its_idle_lifetime_is_over() -> None:
    now = [1000.0]
    sessions = Sessions(clock=lambda: now[0])
    token = Token("t", "read", "0" * 64, 0.0)
    session = sessions.open(token)
    now[0] += SESSION_IDLE - 1
    assert sessions.get(session) == token  # used: its idle time begins again
    now[0] += SESSION_IDLE - 1
    assert sessions.get(session) == token
    now[0] += SESSION_IDLE + 1
    assert sessions.get(session) is None and sessions.get(session) is None


def test_one_token_s_logins_in_a_loop_log_out_no_other_token_s_session() -> None:
    sessions = Sessions()
    mine, theirs = Token("mine", "read", "0" * 64, 0.0), Token("theirs", "read", "1" * 64, 0.0)
    kept = sessions.open(mine)
    opened = [sessions.open(theirs) for _ in range(MAX_SESSIONS + 3)]
    assert sessions.get(kept) == mine
    assert [sessions.get(session) for session in opened[:3]] == [None] * 3
    assert all(sessions.get(session) == theirs for session in opened[3:])


def test_a_revoked_token_is_refused_at_its_next_request(site: Site) -> None:
    assert site.get("/api/status", site.reader).status_code == 200
    CliRunner().invoke(main, ["token", "revoke", "reader"])
    assert site.get("/api/status", site.reader).status_code == 401


def test_hosts_and_origins_other_than_this_server_s_are_refused(site: Site) -> None:
    rebound = site.get("/api/status", site.reader, host="attacker.example")
    assert rebound.status_code == 403 and "attacker.example" in rebound.json()["error"]
    page = site.get(f"{PAGE}/", host="attacker.example")
    assert page.headers["content-type"].startswith("text/html")
    other = site.get("/api/status", site.reader, origin="http://testserver:3000")
    assert other.status_code == 403 and "other sites" in other.json()["error"]
    same = site.get("/api/status", site.reader, origin="http://testserver")
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers


def test_obsidian_s_origin_is_let_into_the_api_with_a_valid_token_only(site: Site) -> None:
    """Obsidian's requestUrl sends `Origin: app://obsidian.md`: the plugin's token opens the
    API; no token, a wrong one or the page are what they are for anyone else."""
    app = "app://obsidian.md"
    found = site.get("/api/search?q=redis+port&mode=keyword", site.reader, origin=app)
    assert found.status_code == 200 and found.json()["terms"] == ["redis", "port"]
    assert "access-control-allow-origin" not in found.headers
    wrong = site.get("/api/status", "not-a-token", origin=app)
    assert wrong.status_code == 401 and "not valid" in wrong.json()["error"]
    bare = site.get("/api/status", origin=app)
    assert bare.status_code == 403 and "other sites" in bare.json()["error"]
    page = site.get(f"{PAGE}/", site.reader, origin=app)
    assert page.status_code == 403
    lookalike = site.get("/api/status", site.reader, origin="app://obsidian.md.example")
    assert lookalike.status_code == 403


def test_a_body_over_a_megabyte_is_a_413(site: Site) -> None:
    headers = {"Authorization": f"Bearer {site.reader}", "Content-Type": "application/json"}
    large = site.client.post("/mcp", content=b" " * (MAX_BODY + 1), headers=headers)
    assert large.status_code == 413


def test_an_unexpected_failure_is_one_line_to_the_client_and_a_trace_in_the_log(
    site: Site, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Memory) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Memory, "status", broken)
    with caplog.at_level(logging.INFO, logger="memsync"):
        answer = site.get("/api/status", site.reader)
    assert answer.status_code == 500
    assert answer.json() == {
        "error": "/api/status failed unexpectedly (ZeroDivisionError); see the log"
    }
    assert "Traceback" in caplog.text


def test_an_unexpected_failure_on_the_page_is_one_line_too(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Memory, *args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Memory, "read", broken)
    client = TestClient(site.client.app, raise_server_exceptions=False)
    headers = {"Authorization": f"Bearer {site.reader}"}
    answer = client.get(f"{PAGE}/note?location=tech/redis.md:3", headers=headers)
    assert answer.status_code == 500 and answer.headers["content-type"].startswith("text/html")
    assert f"{PAGE}/note failed unexpectedly; see the log" in answer.text
    assert "Traceback" not in answer.text and "ZeroDivisionError" not in answer.text


def test_the_log_names_the_token_never_the_token_itself_nor_the_query(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="memsync"):
        site.get("/api/search?q=oat+milk&mode=keyword", site.reader)
        site.get(f"{PAGE}/login?token={site.reader}")
        for mistyped in (f"{PAGE}x", f"{PAGE}.html", PAGE[:-1], f"/x{PAGE}/"):
            site.get(mistyped)
    assert "GET /api/search 200 reader" in caplog.text and "GET /PAGE/login 303" in caplog.text
    assert "GET /ELSEWHERE 404 -" in caplog.text
    assert site.reader not in caplog.text and "oat" not in caplog.text
    assert PAGE[1:-1] not in caplog.text


def test_starlette_s_own_refusals_are_json_for_the_api_too(site: Site) -> None:
    headers = {"Authorization": f"Bearer {site.reader}"}
    missing = site.get("/api/nothing", site.reader)
    assert missing.status_code == 404 and missing.json() == {"error": "nothing at /api/nothing"}
    posted = site.client.post("/api/search", headers=headers)
    assert posted.status_code == 405 and posted.json() == {"error": "Method Not Allowed"}


def _marked(page: str) -> list[int]:
    """The line numbers the note page marks as asked for."""
    return [int(number) for number in re.findall(r'id="L(\d+)" class="line hit"', page)]


@pytest.mark.parametrize(
    "location, lines",
    [
        ("tech/redis.md", None),
        ("tech/redis.md:3", (3, 3)),
        ("tech/redis.md:1-3", (1, 3)),
        ("[[redis]]", None),
        ("[[tech/redis]]", None),
        ("[[redis|see #3]]", None),  # a # in the shown text names no section
        ("[[Redis#Redis]]", (1, 3)),
        ("[[2026-11-02#Monday]]", (4, 6)),
    ],
)
def test_a_note_location_means_the_same_lines_on_every_face(
    site: Site, location: str, lines: tuple[int, int] | None
) -> None:
    """`get`, /api/get, memory_get and the page parse a location once, the same way: a path,
    `path:N-M` as query prints it, a [[link]] with its section."""
    cli = CliRunner().invoke(main, ["get", location, "--db", str(site.db), "--raw"])
    assert cli.exit_code == 0, cli.output
    api = site.get(f"/api/get?location={urllib.parse.quote(location)}", site.reader)
    assert api.status_code == 200, api.text
    assert api.json()["text"] == cli.stdout.rstrip("\n")
    config = load_config(db=str(site.db))
    server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, ())
    try:
        tool = server.memory_get(path=location).structured_content
    finally:
        server.close()
    assert {key: tool[key] for key in ("path", "start_line", "end_line", "text")} == {
        key: api.json()[key] for key in ("path", "start_line", "end_line", "text")
    }
    page = site.get(f"{PAGE}/note?location={urllib.parse.quote(location)}", site.reader)
    assert page.status_code == 200
    assert _marked(page.text) == ([] if lines is None else list(range(lines[0], lines[1] + 1)))


@pytest.mark.parametrize("location", ["[[Nowhere]]", "nowhere.md", "tech/redis.md:7-9", ""])
def test_a_location_that_names_nothing_is_the_same_message_on_every_face(
    site: Site, location: str
) -> None:
    cli = CliRunner().invoke(main, ["get", location, "--db", str(site.db)])
    assert cli.exit_code == 1
    message = cli.stderr.strip().removeprefix("memsync: error: ")
    api = site.get(f"/api/get?location={urllib.parse.quote(location)}", site.reader)
    assert api.status_code == 400 and api.json() == {"error": message}
    config = load_config(db=str(site.db))
    server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, ())
    try:
        with pytest.raises(ToolError) as refused:
            server.memory_get(path=location)
    finally:
        server.close()
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("mode", "bogus", "unknown mode 'bogus': choose one of hybrid, vector, keyword, rrf"),
        ("limit", "0", "limit must be between 1 and 1000, not 0"),
        ("limit", "many", "setting limit: cannot read 'many' as a whole number"),
        ("min_score", "2", "min_score must be between 0 and 1, not 2.0"),
    ],
)
def test_a_bad_search_setting_is_the_same_message_on_every_face(
    site: Site, setting: str, value: str, message: str
) -> None:
    flag = {"mode": "--mode", "limit": "--limit", "min_score": "--min-score"}[setting]
    cli = CliRunner().invoke(main, ["query", "redis", "--db", str(site.db), flag, value])
    assert cli.exit_code == 2 and message in cli.output
    parameter = {"limit": "n"}.get(setting, setting)
    api = site.get(f"/api/search?q=redis&{parameter}={value}", site.reader)
    assert api.status_code == 400 and api.json() == {"error": message}
    if setting != "mode":  # MCP's schema offers the modes as an enum: a client sends one of them
        config = load_config(db=str(site.db))
        server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, ())
        number = float(value) if setting == "min_score" else value
        try:
            with pytest.raises(ToolError, match=re.escape(message)):
                server.memory_search(query="redis", **{setting: number})
        finally:
            server.close()


def test_a_tag_field_holding_two_tags_means_both_on_every_face(site: Site) -> None:
    cli = CliRunner().invoke(
        main, ["query", "redis", "--db", str(site.db), "--tag", "ops other", "--json"]
    )
    api = site.get("/api/search?q=redis&tag=ops+other&mode=keyword", site.reader).json()
    both = site.get("/api/search?q=redis&tag=ops&tag=other&mode=keyword", site.reader).json()
    assert json.loads(cli.stdout)["results"] == api["results"] == both["results"] == []
    one = site.get("/api/search?q=redis&tag=ops,&mode=keyword", site.reader).json()
    assert [hit["path"] for hit in one["results"]] == ["daily/2026-11-02.md"]


def test_the_page_header_shows_status_facts_without_walking_the_vault(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its facts are those `status --json` gives, read without a walk of every note per page."""
    from memsync import status

    facts = _cli_json("status", "--db", str(site.db), "--json")
    assert isinstance(facts, dict)
    assert site.get("/api/status", site.reader).json().keys() == facts.keys()  # all of them

    def walked(*args: object) -> None:
        raise AssertionError("the page's header walked the vault")

    monkeypatch.setattr(status, "drift", walked)
    answer = site.get(f"{PAGE}/", site.reader)
    assert answer.status_code == 200
    assert facts["model"] is None  # an index made without a model
    expected = f"{facts['files_indexed']} notes indexed · keyword search only"
    assert expected in answer.text
