"""`memsync mcp`: the vault as an agent's memory, over MCP on stdio. The only module that imports
`mcp`; every tool validates, makes one call on the library face (memory) and renders (output).

Agent input is untrusted: every path goes through notes.checked_path (inside the vault, a note
memsync indexes), writes exist only with --writable and never touch protected notes. A bad
argument is a tool error (`isError`) of one line; nothing an agent sends stops the server.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, BinaryIO, Literal, TextIO, TypeVar, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    TextContent,
    ToolAnnotations,
    jsonrpc_message_adapter,
)
from pydantic import Field, ValidationError

from . import output
from .agent import results
from .agent.results import NoteLines, SearchResult, Tree, Written
from .config import RANGES, Config
from .errors import IndexNotFound, MemsyncError, StoreError
from .memory import MAX_QUERY_CHARS, Lines, Memory, search_options

log = logging.getLogger("memsync.mcp")
T = TypeVar("T")

INSTRUCTIONS = (
    "memsync indexes the user's Markdown notes. memory_search finds notes by keyword or meaning "
    "(English and Chinese) and cites path#Lstart-Lend; memory_get reads the exact lines; "
    "memory_tree lists what is indexed; memory_status says how fresh the index is."
)


def _result(text: str, structured: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _read(memory: Memory, path: str, start: int | None, end: int | None) -> Lines | None:
    try:
        return memory.read(path, start, end)
    except MemsyncError:
        return None


def _read_either_form(memory: Memory, path: str, start: int | None, end: int | None) -> Lines:
    """A note named `path` as memory_search's data gives it, else as its text shows it escaped;
    refused when the two forms name two different notes."""
    escaped = output.unescape_name(path)
    if escaped == path:
        return memory.read(path, start, end)
    literal = _read(memory, path, start, end)
    other = _read(memory, escaped, start, end)
    if literal is not None and other is not None:
        raise MemsyncError(
            f"{output.escape_name(path)} names two notes (as given and with its escapes read): "
            "give the path exactly as memory_search's data shows it"
        )
    return literal or other or memory.read(path, start, end)


class _Turns:
    """The index connections, lent one call at a time in the order calls asked: one given back
    goes straight to the call that has waited longest, so that no call is passed over while
    newer ones are served (a plain queue lets a new caller take it first). The one given back
    last is lent first: it is the warmest."""

    def __init__(self, slots: int) -> None:
        self._lock = threading.Lock()
        self._free = list(range(slots))
        self._waiting: collections.deque[tuple[threading.Event, list[int]]] = collections.deque()

    def take(self, timeout: float | None = None) -> int:
        """A free slot, waiting for one; queue.Empty after `timeout` seconds."""
        with self._lock:
            if self._free and not self._waiting:
                return self._free.pop()
            handed: list[int] = []
            turn = (threading.Event(), handed)
            self._waiting.append(turn)
        if not turn[0].wait(timeout):
            with self._lock:
                if not handed:  # not handed one while the wait timed out
                    self._waiting.remove(turn)
                    raise queue.Empty
        return handed[0]

    def give(self, slot: int) -> None:
        with self._lock:
            if self._waiting:
                event, handed = self._waiting.popleft()
                handed.append(slot)
                event.set()
            else:
                self._free.append(slot)


class MemoryServer:
    """The tools over one index, opened on first use and kept open (vectors in memory)."""

    def __init__(
        self,
        config: Config,
        open_memory: Callable[[], Memory],
        writable: bool,
        protect: tuple[str, ...],
        slots: int = 1,
    ) -> None:
        """`slots`: index connections, each opened on first need and serving one call at a time
        (tools run on worker threads); an HTTP server's clients share several."""
        self.config = config
        self.open_memory = open_memory
        self.writable = writable
        self.protect = protect
        self._memories: list[Memory | None] = [None] * slots
        self._free = _Turns(slots)
        self._held = threading.local()  # the slot this thread's call holds

    def memory(self, slot: int = 0) -> Memory:
        opened = self._memories[slot]
        if opened is None:
            opened = self._memories[slot] = self.open_memory()
        return opened

    @contextlib.contextmanager
    def borrowed(self) -> Iterator[Memory]:
        """An index connection for one call, waiting for one to be free; one whose database
        went away (a server restarted, a disk) is opened again by the next call."""
        self._held.slot = self._free.take()
        try:
            yield self.memory(self._held.slot)
        except StoreError as exc:
            if exc.reopen:
                log.warning("%s; the index is opened again on the next call", exc)
                self._close(self._held.slot)
            raise
        finally:
            self._free.give(self._held.slot)

    def check_writable(self) -> None:
        """At start: --writable only on the vault's host (VaultTaken elsewhere). A missing index
        is said by the first call, as without --writable."""
        if not self.writable:
            return
        try:
            memory = self.memory()
        except IndexNotFound:
            return
        memory.check_writable_here()

    def close(self) -> None:
        for slot in range(len(self._memories)):
            self._close(slot)

    def _close(self, slot: int) -> None:
        memory, self._memories[slot] = self._memories[slot], None
        if memory is not None:
            with contextlib.suppress(Exception):  # a connection the server dropped may not close
                memory.close()

    def exit_now(self, why: str) -> None:
        """On SIGTERM/SIGINT: let a tool call in progress (a write) finish, then leave at once. A
        clean shutdown would wait for the SDK's thread that is blocked reading stdin."""
        deadline = time.monotonic() + 10
        with contextlib.suppress(queue.Empty):
            for _ in self._memories:
                self._free.take(timeout=max(deadline - time.monotonic(), 0))
        log.info("stopped (%s)", why)
        logging.shutdown()
        os._exit(0)

    def call(self, name: str, work: Callable[[Memory], T]) -> T:
        """One tool call: memsync's errors become one-line tool errors; anything else is logged
        with its trace and reported in one line; the server goes on."""
        started = time.perf_counter()
        try:
            with self.borrowed() as memory:
                return work(memory)
        except MemsyncError as exc:
            raise ToolError(output.escape_controls(str(exc))) from None  # a name may hold a newline
        except Exception as exc:
            log.exception("%s failed", name)
            raise ToolError(
                f"{name} failed unexpectedly ({exc.__class__.__name__}); see the log"
            ) from None
        finally:
            log.debug("%s: %.1f ms", name, (time.perf_counter() - started) * 1000)

    @contextlib.contextmanager
    def _unlocked(self) -> Iterator[None]:
        """Inside a call: its slot let go while it waits on something other than the index (a
        reranker), so that the other tools answer meanwhile; a free one taken back after."""
        self._free.give(self._held.slot)
        try:
            yield
        finally:
            self._held.slot = self._free.take()

    # -- tools ----------------------------------------------------------------------------------

    def memory_search(
        self,
        query: Annotated[
            str,
            Field(
                description="What to find: words, a phrase or a question "
                f"(at most {MAX_QUERY_CHARS:,} characters)."
            ),
        ],
        limit: Annotated[
            int | None,
            Field(description="How many chunks to return, 1-1000 (default: the user's limit)."),
        ] = None,
        min_score: Annotated[
            float | None,
            Field(description="Drop chunks scoring below this, 0-1 (default: the user's, 0.35)."),
        ] = None,
        mode: Annotated[
            Literal["hybrid", "vector", "keyword", "rrf"] | None,
            Field(description="Keyword, meaning (vector) or both (default: the user's, hybrid)."),
        ] = None,
        decay: Annotated[
            bool | None, Field(description="Rank older daily notes lower (default: the user's).")
        ] = None,
        mmr: Annotated[
            bool | None, Field(description="Prefer diverse results (default: the user's).")
        ] = None,
        path: Annotated[
            str | None,
            Field(
                description="Only notes in this folder (projects/) or glob (daily/2026-11-*.md)."
            ),
        ] = None,
        since: Annotated[
            str | None,
            Field(
                description="Only notes dated on or after: YYYY-MM-DD, today, yesterday, 7d, 2w, 3m."
            ),
        ] = None,
        until: Annotated[
            str | None, Field(description="Only notes dated on or before (forms as since).")
        ] = None,
        tags: Annotated[
            list[str] | None,
            Field(description="Only notes with every one of these tags (without #)."),
        ] = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Search the user's notes by keyword and by meaning (English and Chinese); returns the
        best chunks with path, line range, scores and a citation path#Lstart-Lend. `path`: a
        folder (projects/) or glob (daily/2026-11-*.md) to search within; `since`/`until`: the
        notes' dates (YYYY-MM-DD, today, yesterday, 7d, 2w, 3m); `tags`: all must match.
        Defaults (limit, mode, min_score, decay, mmr) come from the user's memsync
        configuration."""
        for name, value in (("limit", limit), ("min_score", min_score)):
            if value is not None and not RANGES[name].admits(value):
                raise ToolError(f"{name} must be {RANGES[name]}")

        def work(memory: Memory) -> CallToolResult:
            options = search_options(
                self.config,
                paths=[path] if path else [],
                since=since,
                until=until,
                tags=tags or [],
                limit=limit,
                min_score=min_score,
                mode=mode,
                decay=decay,
                mmr=mmr,
            )
            outcome = memory.ranked(query, options)
            with self._unlocked():
                outcome = memory.reranked(outcome, options)
            result = output.search_result(outcome)
            return _result(output.search_text(result), result)

        return self.call("memory_search", work)

    def memory_get(
        self,
        path: Annotated[
            str, Field(description="The note's path relative to the vault, as search returns it.")
        ],
        start_line: Annotated[
            int | None, Field(description="First line to read, 1-based (default: 1).")
        ] = None,
        end_line: Annotated[
            int | None, Field(description="Last line to read, inclusive (default: the last).")
        ] = None,
    ) -> Annotated[CallToolResult, NoteLines]:
        """Read lines of one note from disk, now, with line numbers (the whole note by default; at
        most 400 lines or 64 KB per call: the answer says how to get the rest). `path` is
        relative to the vault, as memory_search returns it."""

        def work(memory: Memory) -> CallToolResult:
            lines = _read_either_form(memory, path, start_line, end_line)
            text, data = output.lines_result(lines)
            return _result(text, data)

        return self.call("memory_get", work)

    def memory_tree(
        self,
        path: Annotated[
            str, Field(description="A folder relative to the vault; empty for the whole vault.")
        ] = "",
        depth: Annotated[
            int | None,
            Field(
                description="Levels of folders to list, 1 or more (default: all, or as many "
                "as 500 entries allow)."
            ),
        ] = None,
    ) -> Annotated[CallToolResult, Tree]:
        """The notes memsync has indexed under a folder ('' = the whole vault), each with its
        size, modification time and chunk count; `depth` 1 = that folder's own notes, deeper
        folders summarised. At most 500 entries: without `depth`, a larger subtree is listed as
        deep as that allows, and `more` says what was left out. Ignored and hidden files never
        appear: this is what is indexed."""
        if depth is not None and depth < 1:
            raise ToolError("depth must be 1 or more (or omitted for the whole subtree)")

        def work(memory: Memory) -> CallToolResult:
            folder, listing = memory.tree(path)
            tree = results.tree_of(listing, folder, depth)
            return _result(output.tree_text(tree), tree)

        return self.call("memory_tree", work)

    def memory_status(self) -> Annotated[CallToolResult, dict[str, Any]]:
        """What `memsync status --json` says: the vault, the model, counts, the watcher, skipped
        files, and whether the index matches the notes on disk."""

        def work(memory: Memory) -> CallToolResult:
            facts = memory.status()
            return _result(output.status_text(facts), facts)

        return self.call("memory_status", work)

    def memory_write(
        self,
        content: Annotated[str, Field(description="Markdown text to write, at most 256 KB.")],
        path: Annotated[
            str | None,
            Field(
                description="The note relative to the vault, ending .md (default: today's "
                "daily/YYYY-MM-DD.md)."
            ),
        ] = None,
        mode: Annotated[
            Literal["append", "create", "replace"],
            Field(
                description="append at the end (default), create a new note (fails if it "
                "exists), or replace an existing note's whole text."
            ),
        ] = "append",
    ) -> Annotated[CallToolResult, Written]:
        """Write to the user's notes: append (default; to today's daily/YYYY-MM-DD.md when no
        path is given, created with a heading), create (fails if the note exists) or replace.
        Atomic; indexed before this returns, so memory_search finds it. Protected notes
        (AGENTS.md, MEMORY.md, ...) are never written."""

        def work(memory: Memory) -> CallToolResult:
            written: Written = memory.write(content, path, mode, self.protect)  # type: ignore[assignment]
            return _result(output.written_text(written), written)

        return self.call("memory_write", work)


READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# a write may replace a note's text (mode replace); it never reaches outside the vault
WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)


def build(server: MemoryServer, read_only: bool = False) -> MCPServer:
    """The tools in a fixed order, each with hints a client can act on (auto-approving reads);
    memory_write on a --writable server unless `read_only` (an HTTP client's read token)."""
    app = MCPServer("memsync", instructions=INSTRUCTIONS, log_level="WARNING")
    tools: list[tuple[Callable[..., Any], ToolAnnotations]] = [
        (server.memory_search, READS),
        (server.memory_get, READS),
        (server.memory_tree, READS),
        (server.memory_status, READS),
    ]
    if server.writable and not read_only:
        tools.append((server.memory_write, WRITES))
    for tool, hints in tools:
        app.add_tool(tool, name=tool.__name__, annotations=hints, structured_output=True)
    return app


def without_lone_surrogates(line: str) -> str:
    """Pure: a JSON line whose strings hold a lone surrogate ("\\ud800": valid JSON, which the
    SDK's parser refuses without a reply) with each one as U+FFFD, so the request is answered;
    any other line as it is."""
    if "\\u" not in line.lower():
        return line  # only an escape can spell a lone surrogate: stdin is decoded with replacement
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return line  # not JSON, or too deep to read: answered with an error
    cleaned = _replace_surrogates(message)
    return line if cleaned == message else json.dumps(cleaned, ensure_ascii=False) + "\n"


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


class _StdinLines:
    """stdin for the SDK's transport, read as UTF-8 with replacement, line by line."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def readline(self) -> str:
        return without_lone_surrogates(self.raw.readline().decode("utf-8", "replace"))


# a JSON text's tokens: a string, a bracket or separator, or a bare scalar (number, true, null)
_JSON_TOKENS = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+)')


def _message(line: str) -> SessionMessage | JSONRPCError:
    """Pure: one of the client's lines as the message it holds, or the error that answers it. The
    SDK's transport answered no line it could not take as a message, and took a request whose id
    is neither an integer nor a string for a notification, which nobody answers."""
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        return _refusal(line, exc.errors()[0])
    if isinstance(message, JSONRPCNotification) and _top_level_id(line) is not None:
        return _error(None, INVALID_REQUEST, "Invalid Request: an id is an integer or a string")
    return SessionMessage(message)


def _refusal(line: str, problem: Any) -> JSONRPCError:
    """The answer to a line that is no message, with its id where one can be read (JSON-RPC's
    null where not)."""
    request_id = _answerable_id(_top_level_id(line))
    if problem["type"] != "json_invalid":
        return _error(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC message")
    if "recursion limit" in problem["msg"]:  # valid JSON, maybe, but deeper than the SDK reads
        return _error(request_id, INVALID_REQUEST, "Invalid Request: nested too deeply")
    return _error(None, PARSE_ERROR, "Parse error")


def _error(request_id: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _top_level_id(line: str) -> str | None:
    """Pure: the text of the value of a JSON object's own "id" key, None without one; read token
    by token, so that a request nested too deeply to parse whole still has its id read."""
    depth, last_two = 0, ("", "")
    for match in _JSON_TOKENS.finditer(line):
        token = match.group(1)
        if depth == 1:
            if last_two == ('"id"', ":"):
                return token
            last_two = (last_two[1], token)
        depth += (token in ("{", "[")) - (token in ("}", "]"))
    return None


def _answerable_id(token: str | None) -> int | str | None:
    """An id an answer may carry: JSON-RPC's integer or string; None for any other."""
    try:
        value = json.loads(token) if token is not None else None
    except ValueError:
        return None  # an object or array
    valid = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    return value if valid else None


async def _serve_stdio(app: MCPServer) -> None:
    """MCPServer.run("stdio"), except that memsync reads the lines itself so that every line gets
    an answer: one that holds no message the server can take gets a JSON-RPC error."""
    lowlevel = app._lowlevel_server  # the SDK's own run_stdio_async does the same
    lines = anyio.wrap_file(cast(TextIO, _StdinLines(sys.stdin.buffer)))  # it reads lines only
    no_lines = anyio.wrap_file(io.StringIO())  # the transport's own reader is left without any
    async with stdio_server(stdin=no_lines) as (unread, write_stream):
        unread.close()
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def forward() -> None:
            async with send:
                async for line in lines:
                    message = _message(line)
                    if isinstance(message, SessionMessage):
                        await send.send(message)
                        continue
                    log.warning("a line that holds no request: answered %s", message.error.message)
                    await write_stream.send(SessionMessage(message))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(forward)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())


def serve(server: MemoryServer) -> None:
    """Until the client closes stdin (or SIGTERM/SIGINT, which the CLI turns into a clean exit)."""
    app = build(server)
    log.info("serving MCP on stdio (%s)", "writable" if server.writable else "read-only")
    try:
        anyio.run(_serve_stdio, app)
    finally:
        server.close()
