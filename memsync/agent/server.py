"""`memsync mcp`: the vault as an agent's memory, over MCP on stdio (agent.stdio), or over HTTP
where web.app mounts it. Each tool validates, makes one call on the library face (memory)
and renders (output); its structured result has its shape in memsync.shapes. A new tool is a
method of MemoryServer and a line of build().

Agent input is untrusted: every path goes through notes.checked_path (inside the vault, a note
memsync indexes), writes exist only with --writable and never touch protected notes. A bad
argument is a tool error (`isError`) of one line; nothing an agent sends stops the server.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.prompts.base import Message, Prompt
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolResult,
    InputRequiredResult,
    ListResourcesResult,
    PaginatedRequestParams,
    ResourceLink,
    TextContent,
    ToolAnnotations,
)
from pydantic import Field

from .. import __version__, output
from ..config import MODES, Config
from ..errors import ArgumentError, IndexNotFound, MemsyncError
from ..memory import (
    MAX_QUERY_CHARS,
    RELATED_LIMIT,
    Memory,
    SearchRequest,
    note_filter,
    note_request,
    search_options,
    search_request,
)
from ..shapes import Links, NoteLines, RelatedResult, SearchResult, Tree, Written
from . import prompts, resources, results, stdio
from .lending import Connections

log = logging.getLogger("memsync.mcp")

# the filters memory_search and memory_related share, as `--path`, `--since`, `--until`, `--tag`
InFolder = Annotated[
    str | None,
    Field(description="Only notes in this folder (projects/) or glob (daily/2026-11-*.md)."),
]
Since = Annotated[
    str | None,
    Field(description="Only notes dated on or after: YYYY-MM-DD, today, yesterday, 7d, 2w, 3m."),
]
Until = Annotated[str | None, Field(description="Only notes dated on or before (forms as since).")]
Tagged = Annotated[
    list[str] | None, Field(description="Only notes with every one of these tags (without #).")
]
T = TypeVar("T")

INSTRUCTIONS = (
    "memsync indexes the user's Markdown notes. memory_search finds notes by keyword or meaning "
    "(English and Chinese) and cites path#Lstart-Lend; memory_get reads the exact lines; "
    "memory_get also follows a link as the notes write it ([[Note#Heading]]); memory_links "
    "lists a note's links and backlinks; memory_related the notes nearest in meaning to a "
    "note; memory_tree lists what is indexed; memory_status says how fresh the index is. Each "
    "indexed note is also a resource, memsync://note/PATH, which a search result links to."
)


def _parsed(make: Callable[[], T]) -> T:
    """A request parsed before any index is opened: a bad one is the tool's error, in one line."""
    try:
        return make()
    except MemsyncError as exc:
        raise ToolError(output.escape_controls(str(exc))) from None


def _result(text: str, structured: Any, links: Sequence[ResourceLink] = ()) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text), *links], structured_content=structured
    )


# how a call's failure reaches the client: (its one line, memsync's error or None) -> exception
Refusal = Callable[[str, MemsyncError | None], Exception]


def _tool_error(message: str, cause: MemsyncError | None) -> Exception:
    return ToolError(message)


def _resource_error(message: str, cause: MemsyncError | None) -> Exception:
    """A note that cannot be read is the SDK's "not found" (invalid params): memory_get's words."""
    if isinstance(cause, ArgumentError):
        return ResourceNotFoundError(message)
    return ResourceError(message)


def _request_error(message: str, cause: MemsyncError | None) -> Exception:
    """An MCPError (a page of resources, a prompt): the SDK would put any other error in words
    of its own."""
    code = INVALID_PARAMS if isinstance(cause, ArgumentError) else INTERNAL_ERROR
    return MCPError(code, message)


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
        self.writable = writable
        self.protect = protect
        self.connections = Connections(open_memory, slots)

    def check_writable(self) -> None:
        """At start: --writable only on the vault's host (VaultTaken elsewhere). A missing index
        is said by the first call, as without --writable."""
        if not self.writable:
            return
        try:
            memory = self.connections.memory()
        except IndexNotFound:
            return
        memory.check_writable_here()

    def close(self) -> None:
        self.connections.close()

    def exit_now(self, why: str) -> None:
        """On SIGTERM/SIGINT: let a tool call in progress (a write) finish, then leave at once. A
        clean shutdown would wait for the SDK's thread that is blocked reading stdin."""
        self.connections.wait_for_calls(10)
        log.info("stopped (%s)", why)
        logging.shutdown()
        os._exit(0)

    def call(self, name: str, work: Callable[[Memory], T], refuse: Refusal = _tool_error) -> T:
        """One call (a tool's, a resource's, a prompt's): memsync's errors become the one line
        `refuse` makes of them; anything else is logged with its trace and reported in one
        line; the server goes on."""
        started = time.perf_counter()
        try:
            with self.connections.borrowed() as memory:
                return work(memory)
        except MemsyncError as exc:  # a name may hold a newline
            raise refuse(output.escape_controls(str(exc)), exc) from None
        except Exception as exc:
            log.exception("%s failed", name)
            raise refuse(
                f"{name} failed unexpectedly ({exc.__class__.__name__}); see the log", None
            ) from None
        finally:
            log.debug("%s: %.1f ms", name, (time.perf_counter() - started) * 1000)

    def _searched(self, memory: Memory, asked: SearchRequest) -> SearchResult:
        """A search, its slot let go while a reranker thinks."""
        outcome = memory.ranked(asked.text, asked.options)
        with self.connections.unlocked():
            outcome = memory.reranked(outcome, asked.options)
        return output.search_result(outcome)

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
            str | None,
            Field(
                description="Keyword, meaning (vector) or both (default: the user's, hybrid).",
                json_schema_extra={"enum": list(MODES)},  # read by search_request, as every face's
            ),
        ] = None,
        decay: Annotated[
            bool | None, Field(description="Rank older daily notes lower (default: the user's).")
        ] = None,
        mmr: Annotated[
            bool | None, Field(description="Prefer diverse results (default: the user's).")
        ] = None,
        path: InFolder = None,
        since: Since = None,
        until: Until = None,
        tags: Tagged = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Search the user's notes by keyword and by meaning (English and Chinese); returns the
        best chunks with path, line range, scores and a citation path#Lstart-Lend. `path`: a
        folder (projects/) or glob (daily/2026-11-*.md) to search within; `since`/`until`: the
        notes' dates (YYYY-MM-DD, today, yesterday, 7d, 2w, 3m); `tags`: all must match.
        Defaults (limit, mode, min_score, decay, mmr) come from the user's memsync
        configuration."""
        asked = _parsed(
            lambda: search_request(
                self.config,
                query,
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
        )

        def work(memory: Memory) -> CallToolResult:
            result = self._searched(memory, asked)
            links = resources.note_links(hit["path"] for hit in result["results"])
            return _result(output.search_text(result), result, links)

        return self.call("memory_search", work)

    def memory_get(
        self,
        path: Annotated[
            str,
            Field(
                description="The note's path relative to the vault, as search returns it "
                "(path:N-M reads those lines), or a link as notes write it: [[Note]], "
                "[[Note#Heading]] (that section), [[Note#^block]]."
            ),
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
            lines = memory.read_location(note_request(path, start_line, end_line))
            text, data = output.lines_result(lines)
            return _result(text, data)

        return self.call("memory_get", work)

    def memory_links(
        self,
        path: Annotated[
            str,
            Field(description="The note: its path as search returns it, or [[its name]]."),
        ],
    ) -> Annotated[CallToolResult, Links]:
        """A note's links (each with its line, as written, and the note it opens, or none) and
        its backlinks (the lines of other notes that link to it, with citations). At most 500
        of each: `more` says what was left out. Follow a link with memory_get("[[Note#Heading]]")."""

        def work(memory: Memory) -> CallToolResult:
            found = memory.links(path)
            return _result(output.links_text(found), output.links_data(found))

        return self.call("memory_links", work)

    def memory_related(
        self,
        note: Annotated[
            str,
            Field(
                description="The note: its path as search returns it (path:N-M: those lines), "
                "or [[its name]] / [[Note#Heading]] as notes link it."
            ),
        ],
        limit: Annotated[
            int | None, Field(description="How many notes to return, 1-1000 (default 10).")
        ] = None,
        path: InFolder = None,
        since: Since = None,
        until: Until = None,
        tags: Tagged = None,
    ) -> Annotated[CallToolResult, RelatedResult]:
        """The notes nearest in meaning to one note (itself excluded), best first, one entry per
        note with the lines that make it related, a score as memory_search's and a citation.
        Related by meaning, not by links: memory_links lists those."""
        options = _parsed(
            lambda: search_options(
                self.config,
                paths=[path] if path else [],
                since=since,
                until=until,
                tags=tags or [],
                limit=limit or RELATED_LIMIT,
            )
        )

        def work(memory: Memory) -> CallToolResult:
            result = output.related_result(memory.related(note_request(note), options))
            return _result(output.related_list(result), result)

        return self.call("memory_related", work)

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

    # -- resources: every indexed note, read from disk as memory_get reads it ---------------

    def note_resources(self, cursor: str | None) -> ListResourcesResult:
        """resources/list: a page of the indexed notes, in path order."""

        def work(memory: Memory) -> ListResourcesResult:
            after = resources.after_cursor(cursor)
            return resources.notes_page(
                memory.notes_page(after, resources.PAGE_SIZE + 1), resources.PAGE_SIZE
            )

        return self.call("resources/list", work, _request_error)

    def note(self, path: str) -> str:
        """A note of the user's, its whole text read from disk now (the indexed copy where the
        vault is not on this machine), under memory_get's rules."""
        return self.call(
            "resources/read", lambda memory: memory.read(path, capped=False).text, _resource_error
        )

    # -- prompts: what a user picks from the agent's menu ----------------------------------

    def recall(
        self,
        topic: Annotated[str, Field(description="What to recall: words, a phrase or a question.")],
        path: Annotated[
            str | None,
            Field(description="Only notes in this folder (projects/) or glob (daily/2026-*.md)."),
        ] = None,
    ) -> list[Message]:
        """Recall what my notes say about a topic: searches them and hands over the lines
        found, each with its citation."""

        def work(memory: Memory) -> list[Message]:
            asked = search_request(self.config, topic, paths=[path] if path else [])
            return list(prompts.recall(topic, self._searched(memory, asked)))

        return self.call("recall", work, _request_error)

    def note_with_links(
        self,
        note: Annotated[
            str,
            Field(
                description="The note: its path relative to the vault (projects/heron.md) or "
                "[[its name]]."
            ),
        ],
    ) -> list[Message]:
        """Gather a note with its links and backlinks: its text, the notes it links to, and
        the lines of other notes that link to it."""

        def work(memory: Memory) -> list[Message]:
            found = memory.links(note)
            text = memory.read(found.path, capped=False)
            return list(prompts.gathered(text, found))

        return self.call("note_with_links", work, _request_error)

    def daily_review(
        self,
        since: Annotated[
            str | None,
            Field(
                description="The first day: YYYY-MM-DD, today, yesterday, 7d, 2w, 3m "
                "(default: 7d, a week ago)."
            ),
        ] = None,
        until: Annotated[
            str | None,
            Field(description="The last day, in the same forms (default: today)."),
        ] = None,
    ) -> list[Message]:
        """Review my daily notes (daily/YYYY-MM-DD.md) of a date range: what happened, what
        was decided, what is still open."""

        def work(memory: Memory) -> list[Message]:
            dates = note_filter(since=since or "7d", until=until or "today")
            first, last = dates.since or "", dates.until or ""
            daily = memory.daily_notes(first, last)
            kept = prompts.fitting([size for _, size in daily])
            notes = [memory.read(path, capped=False) for path, _ in daily[:kept]]
            left = [path for path, _ in daily[kept:]]
            return list(prompts.review(first, last, notes, left))

        return self.call("daily_review", work, _request_error)


READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# a write may replace a note's text (mode replace); it never reaches outside the vault
WRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)


class _Tools(MCPServer):
    """The SDK's server, answering a call of a tool it does not offer with why, where the SDK
    would say only "Unknown tool": an agent's user learns what to change."""

    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__(
            "memsync", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.refused = refused  # tool name -> the one line that says why it is not offered

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name in self.refused:
            raise ToolError(self.refused[name])
        return await super().call_tool(name, arguments, context)


def _write_refusal(writable: bool, read_only: bool) -> str | None:
    """Pure: why memory_write is not offered (a server without --writable, an HTTP client's
    read token), None where it is."""
    if not writable:
        return "memory_write is off: this server was started without --writable"
    if read_only:
        return "memory_write needs a write token: memsync token add NAME --write"
    return None


def build(server: MemoryServer, read_only: bool = False) -> MCPServer:
    """The tools in a fixed order, each with hints a client can act on (auto-approving reads);
    memory_write on a --writable server unless `read_only` (an HTTP client's read token), and
    where it is not offered, a call of it refused saying why."""
    no_write = _write_refusal(server.writable, read_only)
    app = _Tools({} if no_write is None else {"memory_write": no_write})
    tools: list[tuple[Callable[..., Any], ToolAnnotations]] = [
        (server.memory_search, READS),
        (server.memory_get, READS),
        (server.memory_links, READS),
        (server.memory_related, READS),
        (server.memory_tree, READS),
        (server.memory_status, READS),
    ]
    if no_write is None:
        tools.append((server.memory_write, WRITES))
    for tool, hints in tools:
        app.add_tool(tool, name=tool.__name__, annotations=hints, structured_output=True)
    _offer_notes(app, server)
    for prompt, title in (
        (server.recall, "Recall from my notes"),
        (server.note_with_links, "A note with its links"),
        (server.daily_review, "Review my daily notes"),
    ):
        about = " ".join((prompt.__doc__ or "").split())  # one line, as a menu shows it
        app.add_prompt(
            Prompt.from_function(prompt, name=prompt.__name__, title=title, description=about)
        )
    return app


def _offer_notes(app: MCPServer, server: MemoryServer) -> None:
    """Every indexed note as a resource: listed a page at a time (the SDK would list every
    resource it holds in one answer), read through the template, whose path memsync checks as
    memory_get's (the SDK's own check would answer a `..` with words of its own)."""

    async def list_notes(
        context: ServerRequestContext[Any], params: PaginatedRequestParams
    ) -> ListResourcesResult:
        return await anyio.to_thread.run_sync(server.note_resources, params.cursor)

    app._lowlevel_server.add_request_handler(  # the SDK's own MCPServer registers it there
        "resources/list", PaginatedRequestParams, list_notes
    )
    app.resource(
        resources.NOTE_TEMPLATE,
        name="note",
        title="A note",
        description="A note of the vault, its whole text read from disk now; `path` is "
        "relative to the vault, as memory_search returns it.",
        mime_type=resources.MARKDOWN,
        security=ResourceSecurity(exempt_params=frozenset({"path"})),
    )(server.note)


def serve(server: MemoryServer, streams: Any) -> None:
    """Until the client closes stdin (or SIGTERM/SIGINT, which the CLI turns into a clean exit);
    `streams` holds the command's stdin and stdout."""
    app = build(server)
    log.info("serving MCP on stdio (%s)", "writable" if server.writable else "read-only")
    try:
        stdio.run(app, streams)
    finally:
        server.close()
