"""`memsync serve`'s routes and door, in this process (Starlette's TestClient): the API's answers
are the CLI's, and every refusal (Host, Origin, no token, a revoked one, a large body, a bad
value) is one short answer with no trace."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import EmbeddingServer, write
from starlette.testclient import TestClient

from memsync.cli import main
from memsync.config import load_config
from memsync.mcp_server import MemoryServer
from memsync.memory import Memory
from memsync.serve.http_app import MAX_BODY, make_app
from memsync.serve.listen import cookie_name
from memsync.serve.tokens import Tokens

COOKIE = cookie_name(8631)


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


def _notes(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> Path:
    """Three notes indexed with `flags` (a provider): the index file."""
    vault = tmp_path / "notes"
    write(vault, "MEMORY.md", "# MEMORY\n\n- Coffee: flat white with oat milk.\n")
    write(vault, "tech/redis.md", "# Redis\n\nThe staging Redis listens on port 6380.\n")
    write(vault, "daily/2026-11-02.md", "---\ntags: [ops]\n---\n# Monday\n\nRedis restarted.\n")
    db = tmp_path / "i.sqlite"
    done = CliRunner().invoke(main, ["index", str(vault), "--db", str(db), *flags], env=env)
    assert done.exit_code == 0, done.output
    return db


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with serving(_notes(tmp_path, "--provider", "none")) as served:
        yield served


@contextlib.contextmanager
def serving(db: Path) -> Iterator[Site]:
    config = load_config(db=str(db))
    server = MemoryServer(config, lambda: Memory.open(config, long_lived=True), False, (), 2)
    tokens = Tokens()
    reader = tokens.add("reader")
    hosts = frozenset({"testserver", "127.0.0.1", "localhost"})
    app = make_app(server, tokens, hosts=hosts, cookie=COOKIE, tls=False, slots=2)
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
    db = _notes(tmp_path, "--provider", "openai", env=env)
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
        ("/api/get", "give location="),
        ("/api/get?location=nothing.md", "no note at nothing.md"),
    ],
)
def test_a_bad_value_is_a_400_with_the_cli_s_message(site: Site, query: str, message: str) -> None:
    answer = site.get(query, site.reader)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"] and "\n" not in answer.json()["error"]


def test_without_a_valid_token_the_api_says_401_and_the_page_how_to_log_in(site: Site) -> None:
    for token in (None, "memsync_nothing", "not-even-ours"):
        answer = site.get("/api/status", token)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert "memsync token add" in answer.json()["error"]
    page = site.get("/")
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert "?token=" in page.text and "memsync token add" in page.text
    assert site.client.get("/mcp", headers={"Authorization": "Basic eDp5"}).status_code == 401


def test_the_login_address_opens_a_session_and_drops_the_token(site: Site) -> None:
    answer = site.get(f"/?token={site.reader}&q=redis")
    assert answer.status_code == 303 and answer.headers["location"] == "/?q=redis"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and site.reader not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    assert site.client.get("/api/status").status_code == 200  # the client keeps the cookie
    site.tokens.revoke("reader")
    ended = site.client.get("/api/status")
    assert ended.status_code == 401 and "session ended" in ended.json()["error"]
    assert site.client.get(f"/?token={site.reader}").status_code == 401


def test_a_revoked_token_is_refused_at_its_next_request(site: Site) -> None:
    assert site.get("/api/status", site.reader).status_code == 200
    CliRunner().invoke(main, ["token", "revoke", "reader"])
    assert site.get("/api/status", site.reader).status_code == 401


def test_hosts_and_origins_other_than_this_server_s_are_refused(site: Site) -> None:
    rebound = site.get("/api/status", site.reader, host="attacker.example")
    assert rebound.status_code == 403 and "attacker.example" in rebound.json()["error"]
    assert site.get("/", host="attacker.example").headers["content-type"].startswith("text/html")
    other = site.get("/api/status", site.reader, origin="http://testserver:3000")
    assert other.status_code == 403 and "other sites" in other.json()["error"]
    same = site.get("/api/status", site.reader, origin="http://testserver")
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers


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


def test_the_log_names_the_token_never_the_token_itself_nor_the_query(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="memsync"):
        site.get("/api/search?q=oat+milk&mode=keyword", site.reader)
        site.get(f"/?token={site.reader}")
    assert "GET /api/search 200 reader" in caplog.text
    assert site.reader not in caplog.text and "oat" not in caplog.text


def test_starlette_s_own_refusals_are_json_for_the_api_too(site: Site) -> None:
    headers = {"Authorization": f"Bearer {site.reader}"}
    missing = site.get("/api/nothing", site.reader)
    assert missing.status_code == 404 and missing.json() == {"error": "nothing at /api/nothing"}
    posted = site.client.post("/api/search", headers=headers)
    assert posted.status_code == 405 and posted.json() == {"error": "Method Not Allowed"}
