"""The optional rerank stage, against a real /rerank server on 127.0.0.1 (conftest's)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import anyio
import httpx
import pytest

from memsync.embed.rerank import Reranker
from memsync.errors import EmbeddingResponseError
from tests.conftest import EmbeddingServer, JsonHandler, LocalServer, VaultIndexer, memsync, write


@pytest.fixture
def vault(indexed_vault: VaultIndexer, tmp_path: Path) -> Path:
    """Keyword-only: the fused order is BM25's, and the reranker is told to prefer another note."""
    root = tmp_path / "notes"
    write(root, "deploy.md", "# Deploy\n\nDeploy staging: deploy staging, deploy it to staging.\n")
    write(root, "runbook.md", "# Runbook\n\nThe staging deploy waits for the quokka check.\n")
    write(root, "other.md", "# Other\n\nNothing about that here.\n")
    indexed_vault(root)
    return root


def _query(root: Path, server: EmbeddingServer, *flags: str, **env: str) -> dict:  # type: ignore[type-arg]
    settings = {"MEMSYNC_RERANK_URL": f"{server.url}/v1/rerank", **env}
    done = memsync("query", "deploy staging", "--vault", str(root), "--json", *flags, env=settings)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_reranker_orders_the_top_candidates(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.relevance = lambda query, doc: 1.0 if "quokka" in doc else 0.1
    plain = _query(vault, embedding_server, "--no-rerank")
    assert plain["results"][0]["path"] == "deploy.md" and embedding_server.requests == []
    reranked = _query(vault, embedding_server, "--rerank-top", "5")
    assert [r["path"] for r in reranked["results"][:2]] == ["runbook.md", "deploy.md"]
    assert reranked["results"][0]["rerank_score"] == 1.0
    assert not any("rerank" in n for n in reranked["notices"])
    [sent] = embedding_server.requests
    assert sent["query"] == "deploy staging" and sent["top_n"] == len(sent["documents"]) <= 5
    assert any("quokka check" in d for d in sent["documents"])  # the whole lines it cites


def test_overlapping_chunks_are_listed_with_their_own_lines_and_reranked_by_them(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    """A chunk overlapping a better one of its note is listed with its other lines only: no
    line twice, and the reranker reads the lines each result cites."""
    root = tmp_path / "notes"
    lines = [f"- step {i}: deploy staging, then check service {i} and its logs." for i in range(90)]
    write(root, "long.md", "# Long\n\n" + "\n".join(lines) + "\n")
    indexed_vault(root)
    found = _query(root, embedding_server, "--min-score", "0", "-n", "10")
    results = found["results"]
    assert len(results) >= 3 and {r["path"] for r in results} == {"long.md"}
    cited = [set(range(r["start_line"], r["end_line"] + 1)) for r in results]
    assert sum(len(c) for c in cited) == len(set().union(*cited))  # no line listed twice
    ranges = sorted((r["start_line"], r["end_line"]) for r in results)
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))  # overlapping chunks, cut
    note = (root / "long.md").read_text().split("\n")
    [sent] = embedding_server.requests
    for r in results:
        assert "\n".join(note[r["start_line"] - 1 : r["end_line"]]) in sent["documents"]


def test_text_embeddings_inference_is_spoken_when_configured(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.relevance = lambda query, doc: 1.0 if "quokka" in doc else 0.1
    found = _query(
        vault,
        embedding_server,
        MEMSYNC_RERANK_API="tei",
        MEMSYNC_RERANK_MODEL="bge",
        MEMSYNC_RERANK_API_KEY="sekrit",
    )
    assert found["results"][0]["path"] == "runbook.md"
    [sent] = embedding_server.requests
    assert "texts" in sent and "documents" not in sent
    assert embedding_server.headers[0]["Authorization"] == "Bearer sekrit"


def test_a_failing_reranker_gives_the_results_unreranked_with_a_notice(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.script = [(500, {}), (500, {})]
    found = _query(vault, embedding_server)
    assert found["results"][0]["path"] == "deploy.md"
    assert "rerank_score" not in found["results"][0]
    assert any(n.startswith("results not reranked: rerank answered 500") for n in found["notices"])


def test_a_reranker_that_does_not_answer_costs_the_query_its_time_budget_only(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.delay = 60.0  # the process's own timeout (120 s) would catch a hang
    found = _query(vault, embedding_server, MEMSYNC_QUERY_TIMEOUT="1")
    assert found["results"][0]["path"] == "deploy.md"
    assert any("results not reranked: no answer from" in n for n in found["notices"])


def test_rerank_without_a_reranker_is_a_usage_error_and_nothing_is_sent(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    done = memsync("query", "deploy", "--vault", str(vault), "--rerank")
    assert done.returncode == 2 and "--rerank needs a reranker" in done.stderr
    done = memsync("query", "deploy", "--vault", str(vault))  # not configured: off
    assert done.returncode == 0 and embedding_server.requests == []


@pytest.mark.parametrize(
    "answer",
    [
        {"results": [{"index": 0, "relevance_score": 0.5}]},  # one of two scored
        {"results": [{"index": 0}, {"index": 1}]},  # no scores
        {"data": []},
    ],
)
def test_an_answer_that_is_not_scores_is_a_provider_error(answer: object) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    reranker = Reranker("http://127.0.0.1:9/rerank", "", "jina", timeout=1.0, transport=transport)
    with pytest.raises(EmbeddingResponseError):
        reranker.scores("q", ["a", "b"])


# -- a reranker that misbehaves ------------------------------------------------------------------

Answer = Callable[[BaseHTTPRequestHandler, int, threading.Event], None]


class MisbehavingReranker(LocalServer):
    """A real HTTP server on 127.0.0.1 whose /rerank answer is `answer(handler, documents,
    closing)`: raw bytes, odd headers, a trickle, an endless body. `closing` ends a trickle or
    an endless body when the test ends; `held` is set while an answer is being written."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer
        self.held = threading.Event()
        self.requests: list[dict[str, object]] = []
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.read_json()
                server.requests.append(body)
                server.held.set()
                try:
                    server.answer(
                        self, len(body.get("documents", body.get("texts", []))), server.closing
                    )
                except (BrokenPipeError, ConnectionResetError):
                    pass  # memsync stopped reading, as it should

        self.serve(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/rerank"


def _send(handler: BaseHTTPRequestHandler, raw: bytes, status: int = 200, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(raw)))
    for key, value in headers.items():
        handler.send_header(key.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(raw)


def _results(
    index: Callable[[int], str], score: Callable[[int], str], status: int = 200, **headers: str
) -> Answer:
    """A Jina/Cohere answer written by hand, so that it can hold what json.dumps never writes."""

    def answer(handler: BaseHTTPRequestHandler, documents: int, closing: threading.Event) -> None:
        items = ", ".join(
            f'{{"index": {index(i)}, "relevance_score": {score(i)}}}' for i in range(documents)
        )
        _send(handler, f'{{"results": [{items}]}}'.encode(), status, **headers)

    return answer


def _fine(i: int) -> str:
    return str(i)


def _rising(i: int) -> str:
    return f"{0.1 + i / 10}"  # would put the fused order's last result first


def _trickle(handler: BaseHTTPRequestHandler, documents: int, closing: threading.Event) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "1000000")
    handler.end_headers()
    while not closing.wait(0.05):  # a byte every 50 ms: no read ever waits a whole timeout
        handler.wfile.write(b" ")
        handler.wfile.flush()


def _trickled_headers(
    handler: BaseHTTPRequestHandler, documents: int, closing: threading.Event
) -> None:
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    while not closing.wait(0.05):  # a header that never ends
        handler.wfile.write(b"a")
        handler.wfile.flush()


def _endless(handler: BaseHTTPRequestHandler, documents: int, closing: threading.Event) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()  # no length: the body ends when the connection does
    handler.wfile.write(b'{"results": [], "padding": "')
    chunk = b"x" * 65536
    while not closing.is_set():
        handler.wfile.write(chunk)


MISBEHAVIOURS: dict[str, Answer] = {
    "a score of 1e400": _results(_fine, lambda i: "1e400" if i == 0 else "0.5"),
    "a whole-number score past float's range": _results(_fine, lambda i: "1" + "0" * 400),
    "an index of 1e999": _results(lambda i: "1e999" if i == 0 else str(i), _rising),
    "a NaN score": _results(_fine, lambda i: "NaN" if i == 0 else "0.5"),
    "an infinite score": _results(_fine, lambda i: "Infinity" if i == 1 else "0.5"),
    "a score that is a string": _results(_fine, lambda i: '"0.9"'),
    "an index given twice": _results(lambda i: "0", _rising),
    "float indices": _results(lambda i: f"{i}.0", _rising),
    "boolean indices": _results(lambda i: ["false", "true"][i] if i < 2 else str(i), _rising),
    "an index out of range": _results(lambda i: str(i + 1), _rising),
    "a negative index": _results(lambda i: "-1" if i == 0 else str(i), _rising),
    "results that are not a list": lambda h, n, c: _send(h, b'{"results": 7}'),
    "a body that is not gzip": lambda h, n, c: _send(h, b"not gzip", Content_Encoding="gzip"),
    "deeply nested JSON": lambda h, n, c: _send(
        h, b'{"results": ' + b"[" * 99999 + b"]" * 99999 + b"}"
    ),
    "a 302 with a JSON body": _results(_fine, _rising, 302, Location="/v1/rerank"),
    "a trickle": _trickle,
    "headers a byte at a time": _trickled_headers,
    "an endless body": _endless,
}


def _no_constant(name: str) -> object:
    raise AssertionError(f"memsync printed {name}, which is not JSON")


@pytest.fixture
def misbehaving() -> Iterator[Callable[[Answer], MisbehavingReranker]]:
    servers: list[MisbehavingReranker] = []

    def start(answer: Answer) -> MisbehavingReranker:
        servers.append(MisbehavingReranker(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


_ASK = ("query", "deploy staging", "--explain")


@pytest.mark.parametrize("case", MISBEHAVIOURS)
def test_a_misbehaving_reranker_leaves_the_results_in_fused_order_with_a_notice(
    vault: Path, misbehaving: Callable[[Answer], MisbehavingReranker], case: str
) -> None:
    server = misbehaving(MISBEHAVIOURS[case])
    env = {"MEMSYNC_RERANK_URL": server.url, "MEMSYNC_QUERY_TIMEOUT": "1"}
    ask = (*_ASK, "--vault", str(vault))
    done = memsync(*ask, "--json", env=env)  # memsync() fails on a traceback
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout, parse_constant=_no_constant)
    assert [r["path"] for r in found["results"]] == ["deploy.md", "runbook.md"]
    assert not any("rerank_score" in r for r in found["results"])
    assert any(n.startswith("results not reranked: ") for n in found["notices"]), found
    assert server.requests
    shown = memsync(*ask, env=env)
    assert shown.returncode == 0 and "note: results not reranked: " in shown.stdout


def test_a_score_past_float_s_range_leaves_an_agent_s_search_unreranked_with_a_notice(
    vault: Path, misbehaving: Callable[[Answer], MisbehavingReranker]
) -> None:
    """Over the MCP SDK's client: the search answers, in fused order, and says why."""
    from tests.agent.test_mcp import call_each, with_server

    server = misbehaving(_results(_fine, lambda i: "1" + "0" * 400))
    env = {"MEMSYNC_RERANK_URL": server.url}
    [(error, text, data)] = with_server(
        ["--vault", str(vault)],
        lambda session: call_each(session, (("memory_search", {"query": "deploy staging"}),)),
        env,
    )
    assert not error, text
    assert [r["path"] for r in data["results"]] == ["deploy.md", "runbook.md"]
    [notice] = [n for n in data["notices"] if n.startswith("results not reranked: ")]
    assert "not a finite number" in notice and "results not reranked" in text
    assert server.requests


@pytest.mark.parametrize(
    "url, problem",
    [
        ("http://user:secret@[::1/v1/rerank", "Invalid IPv6 URL"),
        ("http://user:secret@[::1", "Invalid IPv6 URL"),
        ("http://user:secret@127.0.0.1:x/", "Port could not be cast to integer"),
        ("ftp://127.0.0.1/v1/rerank", "http:// or https://"),
        ("http:///v1/rerank", "no host"),
        ("http://user:secret@127.0.0.1:99999/v1/rerank", "Port out of range"),
        ("http://127.0.0.1/v1/\nrerank", "control character"),
    ],
)
def test_a_rerank_url_no_request_can_be_sent_to_is_refused_when_the_settings_are_read(
    vault: Path, url: str, problem: str
) -> None:
    for command in (
        ("query", "deploy", "--vault", str(vault)),
        ("status",),
        ("serve", str(vault), "--listen", "127.0.0.1:9"),  # refused before it listens
    ):
        done = memsync(*command, env={"MEMSYNC_RERANK_URL": url})
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith("memsync: error: rerank_url ") and problem in line
        assert "secret" not in line and "user" not in line and done.stdout == ""


def test_a_url_httpx_refuses_later_leaves_the_results_unreranked_with_a_notice(
    vault: Path,
) -> None:
    """A host IDNA cannot encode passes the settings' check (the standard library's rules),
    and httpx refuses it: a notice, not a failed query."""
    for url, shown in [
        ("http://\u2603.invalid/v1/rerank", "http://\u2603.invalid/v1/rerank cannot be used"),
        ("http://user:secret@127.0.0.1:9/v1/rerank", "cannot reach http://user@127.0.0.1:9/"),
    ]:
        done = memsync(*_ASK, "--vault", str(vault), "--json", env={"MEMSYNC_RERANK_URL": url})
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert [r["path"] for r in found["results"]] == ["deploy.md", "runbook.md"]
        [notice] = [n for n in found["notices"] if n.startswith("results not reranked: ")]
        assert shown in notice and "secret" not in notice


@pytest.fixture
def five(indexed_vault: VaultIndexer, tmp_path: Path) -> Path:
    """Five notes BM25 ranks 1-5 (the query's words fewer in each), which the reranker would
    put in the opposite order."""
    root = tmp_path / "notes"
    for n in range(1, 6):
        write(root, f"n{n}.md", f"# N{n}\n\n" + "deploy staging, " * (6 - n) + f"step {n}.\n")
    indexed_vault(root)
    return root


def test_rerank_top_caps_what_the_reranker_reads_and_the_rest_follow_in_fused_order(
    five: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.relevance = lambda query, doc: 10.0 - doc.count("deploy")
    settings = {"MEMSYNC_RERANK_URL": f"{embedding_server.url}/v1/rerank"}
    ask = ("query", "deploy staging", "--vault", str(five), "--min-score", "0", "-n", "5")
    plain = json.loads(memsync(*ask, "--json", "--no-rerank", env=settings).stdout)
    fused = [r["path"] for r in plain["results"]]
    assert len(fused) == 5
    found = json.loads(
        memsync(*ask, "--json", "--rerank-top", "2", "--explain", env=settings).stdout
    )
    [sent] = embedding_server.requests
    assert len(sent["documents"]) == 2  # not the 5 asked for
    results = found["results"]
    assert [r["path"] for r in results] == [fused[1], fused[0], *fused[2:]]
    assert [("rerank_score" in r) for r in results] == [True, True, False, False, False]
    assert [r["explain"]["rerank"]["fused_rank"] for r in results] == [2, 1, 3, 4, 5]
    assert results[2]["explain"]["rerank"] == {
        "fused_rank": 3,
        "score": None,
        "not_reranked": "past rerank_top (2)",
    }
    shown = memsync(*ask, "--rerank-top", "2", "--explain", env=settings).stdout
    assert "reranked: score " in shown and "(fused #2)" in shown
    assert "not reranked, past rerank_top (2) (fused #3)" in shown


def test_explain_says_when_the_reranker_failed(
    vault: Path, embedding_server: EmbeddingServer
) -> None:
    embedding_server.script = [(500, {}), (500, {})]
    found = _query(vault, embedding_server, "--explain")
    why = found["results"][0]["explain"]["rerank"]
    assert why == {"fused_rank": 1, "score": None, "not_reranked": "the reranker failed"}


def test_a_slow_reranker_holds_up_no_other_tool_call(
    vault: Path, misbehaving: Callable[[Answer], MisbehavingReranker]
) -> None:
    """While memory_search waits for the reranker, memory_get is answered: the reranker answers
    only after it, so a search that held the index through its rerank could not have let it."""
    from mcp.client.session import ClientSession

    from tests.agent.test_mcp import with_server

    release = threading.Event()

    def slow(handler: BaseHTTPRequestHandler, documents: int, closing: threading.Event) -> None:
        while not (release.wait(0.01) or closing.is_set()):
            pass
        _results(_fine, _rising)(handler, documents, closing)

    server = misbehaving(slow)

    async def use(session: ClientSession) -> tuple[object, object, bool]:
        found: dict[str, object] = {}

        async def search() -> None:
            found["search"] = await session.call_tool("memory_search", {"query": "deploy staging"})

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(search)
            assert await anyio.to_thread.run_sync(server.held.wait, 30)  # it has the question
            got = await session.call_tool("memory_get", {"path": "deploy.md"})
            answered_first = not release.is_set()
            release.set()
        return got, found["search"], answered_first

    env = {"MEMSYNC_RERANK_URL": server.url, "MEMSYNC_QUERY_TIMEOUT": "20"}
    got, searched, answered_first = with_server(["--vault", str(vault)], use, env)
    assert answered_first and not got.is_error and "Deploy staging" in got.content[0].text
    assert not searched.is_error, searched.content
    data = searched.structured_content
    assert not any("not reranked" in n for n in data["notices"]), data["notices"]
    assert [r["path"] for r in data["results"]] == ["runbook.md", "deploy.md"]  # reranked


@pytest.mark.parametrize(
    "answer",
    [
        [{"index": True, "score": 0.9}, {"index": 0, "score": 0.5}],  # True is not 1
        '[{"index": 0, "score": 0.9}, {"index": 1, "score": NaN}]',  # as the server wrote it
        [{"index": 0, "score": 0.9}, {"index": 1, "score": False}],
        {"results": [{"index": 0, "score": 0.9}, {"index": 1, "score": 0.5}]},  # not TEI's
    ],
)
def test_text_embeddings_inference_answers_are_held_to_the_same_rules(answer: object) -> None:
    raw = answer if isinstance(answer, str) else json.dumps(answer)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=raw.encode()))
    reranker = Reranker("http://127.0.0.1:9/rerank", "", "tei", timeout=1.0, transport=transport)
    with pytest.raises(EmbeddingResponseError):
        reranker.scores("q", ["a", "b"])
