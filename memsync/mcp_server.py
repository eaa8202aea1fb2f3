"""`memsync mcp`: the vault as an agent's memory, over MCP on stdio. The only module that imports
`mcp`; every tool calls the same library code as the CLI (memory.Memory, notes, status).

Agent input is untrusted: every path goes through vault.checked_path (inside the vault, a note
memsync indexes), writes exist only with --writable and never touch protected notes. A bad
argument is a tool error (`isError`) of one line; nothing an agent sends stops the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date, datetime
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from . import notes
from .config import Config
from .errors import ArgumentError
from .locate import Location
from .memory import Memory
from .search import Options, Outcome, note_filter, path_globs
from .store import user_error
from .vault import checked_path

log = logging.getLogger("memsync.mcp")
T = TypeVar("T")

INSTRUCTIONS = (
    "memsync indexes the user's Markdown notes. memory_search finds notes by keyword or meaning "
    "(English and Chinese) and cites path#Lstart-Lend; memory_get reads the exact lines; "
    "memory_tree lists what is indexed; memory_status says how fresh the index is."
)


class SearchHit(TypedDict):
    path: str
    start_line: int
    end_line: int
    score: float
    vector_score: float | None
    text_score: float | None
    hybrid_match: bool
    snippet: str
    citation: str


class SearchResult(TypedDict):
    query: str
    mode: str
    notices: list[str]
    results: list[SearchHit]


class NoteLines(TypedDict):
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str
    truncated: bool
    citation: str
    note: str | None


class TreeNote(TypedDict):
    path: str
    size: int
    modified: str
    chunks: int


class TreeFolder(TypedDict):
    path: str
    notes: int


class Tree(TypedDict):
    path: str
    notes: list[TreeNote]
    folders: list[TreeFolder]


class Written(TypedDict):
    path: str
    start_line: int
    end_line: int
    citation: str
    indexed: bool


def _result(text: str, structured: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def search_result(outcome: Outcome) -> SearchResult:
    """`memsync query --json`'s results, with the fields the tool's schema names and a citation."""
    hits = []
    for hit in outcome.results:
        data = hit.as_dict()
        data["citation"] = notes.citation(hit.path, hit.start_line, hit.end_line)
        hits.append({key: data[key] for key in SearchHit.__annotations__})
    return {
        "query": outcome.query,
        "mode": outcome.mode,
        "notices": outcome.notices,
        "results": hits,  # type: ignore[typeddict-item]
    }


def search_text(result: SearchResult) -> str:
    """A short list an agent can quote: citation, score, and the best-matching lines."""
    lines = [f"note: {n}" for n in result["notices"]]
    if not result["results"]:
        lines.append(f"no notes match {result['query']!r}")
    for rank, hit in enumerate(result["results"], start=1):
        both = ", keyword and meaning" if hit["hybrid_match"] else ""
        lines.append(f"{rank}. {hit['citation']} (score {hit['score']:.2f}{both})")
        lines += [f"   {line}" for line in hit["snippet"].split("\n")]
    return "\n".join(lines)


def tree_of(listing: list[tuple[str, int, int, int]], folder: str, depth: int | None) -> Tree:
    """Pure: the indexed notes below `folder`, those deeper than `depth` folded into folders."""
    prefix = f"{folder}/" if folder else ""
    shown: list[TreeNote] = []
    folded: dict[str, int] = {}
    for path, size, mtime_ns, chunks in listing:
        rest = path[len(prefix) :].split("/")
        if depth is not None and len(rest) > depth:
            where = prefix + "/".join(rest[:depth])
            folded[where] = folded.get(where, 0) + 1
            continue
        modified = datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")
        shown.append({"path": path, "size": size, "modified": modified, "chunks": chunks})
    folders: list[TreeFolder] = [{"path": p, "notes": n} for p, n in sorted(folded.items())]
    return {"path": folder, "notes": shown, "folders": folders}


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KB"


def tree_text(tree: Tree) -> str:
    """An indented tree: each folder once, its notes and folded subfolders below it."""
    if not tree["notes"] and not tree["folders"]:
        return f"no indexed notes under {tree['path'] or 'the vault'}"
    base = len(tree["path"].split("/")) if tree["path"] else 0
    entries = [(n["path"], n) for n in tree["notes"]] + [
        (f["path"] + "/", f) for f in tree["folders"]
    ]
    lines: list[str] = []
    shown: set[str] = set()
    for path, entry in sorted(entries, key=lambda item: item[0].split("/")):
        parts = path.rstrip("/").split("/")
        for depth in range(base + 1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in shown:
                shown.add(folder)
                lines.append("  " * (depth - base - 1) + parts[depth - 1] + "/")
        indent = "  " * (len(parts) - base - 1)
        if path.endswith("/"):
            lines.append(f"{indent}{parts[-1]}/  ({entry['notes']} notes below)")
        else:
            lines.append(
                f"{indent}{parts[-1]}  {_size(entry['size'])}  {entry['modified']}  "
                f"{entry['chunks']} chunks"
            )
    return "\n".join(lines)


def _folder(path: str) -> str:
    """A folder argument: relative, without '..'; '' is the whole vault."""
    if any(ch in path for ch in "*?["):
        raise ArgumentError("memory_tree takes a folder, not a glob")
    globs = path_globs([path])  # refuses '..', absolute paths; (folder, folder/*) or nothing
    return globs[0] if globs else ""


class MemoryServer:
    """The tools over one index, opened on first use and kept open (vectors in memory)."""

    def __init__(
        self,
        config: Config,
        locate: Callable[[], Location],
        writable: bool,
        protect: tuple[str, ...],
    ) -> None:
        self.config = config
        self.locate = locate
        self.writable = writable
        self.protect = protect
        self._memory: Memory | None = None
        self._lock = threading.Lock()  # tools run on worker threads; one index connection

    def memory(self) -> Memory:
        if self._memory is None:
            self._memory = Memory(self.config, self.locate(), long_lived=True)
        return self._memory

    def close(self) -> None:
        if self._memory is not None:
            memory, self._memory = self._memory, None
            with contextlib.suppress(Exception):  # a connection the server dropped may not close
                memory.close()

    def exit_now(self, why: str) -> None:
        """On SIGTERM/SIGINT: let a tool call in progress (a write) finish, then leave at once. A
        clean shutdown would wait for the SDK's thread that is blocked reading stdin."""
        self._lock.acquire(timeout=10)
        log.info("stopped (%s)", why)
        logging.shutdown()
        os._exit(0)

    def call(self, name: str, work: Callable[[Memory], T]) -> T:
        """One tool call: memsync's errors become one-line tool errors; anything else is logged
        with its trace and reported in one line; the server goes on."""
        started = time.perf_counter()
        with self._lock:
            try:
                return work(self.memory())
            except Exception as exc:
                problem = user_error(exc)
                if problem is None:
                    log.exception("%s failed", name)
                    problem = f"{name} failed unexpectedly ({exc.__class__.__name__}); see the log"
                elif problem is not exc:  # the database failed (a server restarted, a disk)
                    log.warning("%s: %s; the index is opened again on the next call", name, problem)
                    self.close()
                raise ToolError(str(problem)) from None
            finally:
                log.debug("%s: %.1f ms", name, (time.perf_counter() - started) * 1000)

    # -- tools ----------------------------------------------------------------------------------

    def memory_search(
        self,
        query: str,
        limit: int = 6,
        min_score: float | None = None,
        mode: Literal["hybrid", "vector", "keyword", "rrf"] | None = None,
        decay: bool | None = None,
        mmr: bool | None = None,
        path: str | None = None,
        since: str | None = None,
        until: str | None = None,
        tags: list[str] | None = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        """Search the user's notes by keyword and by meaning (English and Chinese); returns the
        best chunks with path, line range, scores and a citation path#Lstart-Lend. `path`: a
        folder (projects/) or glob (daily/2026-11-*.md) to search within; `since`/`until`: the
        notes' dates (YYYY-MM-DD, today, yesterday, 7d, 2w, 3m); `tags`: all must match.
        Defaults (mode, min_score, decay, mmr) come from the user's memsync configuration."""
        if not query.strip():
            raise ToolError("query is empty")
        if not 1 <= limit <= 1000:
            raise ToolError("limit must be between 1 and 1000")
        if min_score is not None and not 0 <= min_score <= 1:
            raise ToolError("min_score must be between 0 and 1")

        def work(memory: Memory) -> CallToolResult:
            flags = {"min_score": min_score, "mode": mode, "decay": decay, "mmr": mmr}
            only = note_filter([path] if path else [], since, until, tags or [])
            options = replace(
                Options.from_settings(self.config),
                limit=limit,
                only=only,
                **{k: v for k, v in flags.items() if v is not None},
            )
            result = search_result(memory.search(query, options))
            return _result(search_text(result), result)

        return self.call("memory_search", work)

    def memory_get(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> Annotated[CallToolResult, NoteLines]:
        """Read lines of one note from disk, now, with line numbers (the whole note by default; at
        most 400 lines or 64 KB per call: the answer says how to get the rest). `path` is
        relative to the vault, as memory_search returns it."""

        def work(memory: Memory) -> CallToolResult:
            root = memory.vault_root()
            rel = checked_path(root, path, memory.rules())
            lines = notes.read_lines(root, rel, start_line, end_line, self.config.max_file_bytes)
            data: NoteLines = lines.as_dict()  # type: ignore[assignment]
            text = lines.numbered() or f"{rel} is empty"
            if lines.rest():
                text += f"\n({lines.rest()})"
            return _result(text, data)

        return self.call("memory_get", work)

    def memory_tree(
        self, path: str = "", depth: int | None = None
    ) -> Annotated[CallToolResult, Tree]:
        """The notes memsync has indexed under a folder ('' = the whole vault), each with its
        size, modification time and chunk count; `depth` 1 = that folder's own notes, deeper
        folders summarised. Ignored and hidden files never appear: this is what is indexed."""
        if depth is not None and depth < 1:
            raise ToolError("depth must be 1 or more (or omitted for the whole subtree)")

        def work(memory: Memory) -> CallToolResult:
            folder = _folder(path)
            tree = tree_of(memory.store.listing(folder), folder, depth)
            return _result(tree_text(tree), tree)

        return self.call("memory_tree", work)

    def memory_status(self) -> Annotated[CallToolResult, dict[str, Any]]:
        """What `memsync status --json` says: the vault, the model, counts, the watcher, skipped
        files, and whether the index matches the notes on disk."""
        from . import output
        from .status import gather

        def work(memory: Memory) -> CallToolResult:
            facts = gather(memory.location)
            return _result(output.status_text(facts), facts)

        return self.call("memory_status", work)

    def memory_write(
        self,
        content: str,
        path: str | None = None,
        mode: Literal["append", "create", "replace"] = "append",
    ) -> Annotated[CallToolResult, Written]:
        """Write to the user's notes: append (default; to today's daily/YYYY-MM-DD.md when no
        path is given, created with a heading), create (fails if the note exists) or replace.
        Atomic; indexed before this returns, so memory_search finds it. Protected notes
        (AGENTS.md, MEMORY.md, ...) are never written."""

        def work(memory: Memory) -> CallToolResult:
            text = notes.check_content(content)
            root = memory.vault_root()
            today = date.today().isoformat()
            rel = checked_path(root, path or f"daily/{today}.md", memory.rules(), existing=False)
            if notes.protected(rel, self.protect):
                raise ArgumentError(f"{rel} is protected: memsync does not let an agent write it")
            heading = f"# {today}" if path is None else ""
            written = notes.write_note(root, rel, text, mode, heading)
            indexed = memory.sync_note(rel, written.sha256)
            result: Written = {
                "path": rel,
                "start_line": written.start_line,
                "end_line": written.end_line,
                "citation": notes.citation(rel, written.start_line, written.end_line),
                "indexed": indexed,
            }
            said = f"wrote {result['citation']}" + ("" if indexed else " (not indexed yet)")
            return _result(said, result)

        return self.call("memory_write", work)


def build(server: MemoryServer) -> MCPServer:
    app = MCPServer("memsync", instructions=INSTRUCTIONS, log_level="WARNING")
    tools = [server.memory_search, server.memory_get, server.memory_tree, server.memory_status]
    if server.writable:
        tools.append(server.memory_write)
    for tool in tools:
        app.add_tool(tool, name=tool.__name__, structured_output=True)
    return app


def serve(server: MemoryServer) -> None:
    """Until the client closes stdin (or SIGTERM/SIGINT, which the CLI turns into a clean exit)."""
    app = build(server)
    log.info("serving MCP on stdio (%s)", "writable" if server.writable else "read-only")
    try:
        app.run("stdio")
    finally:
        server.close()
