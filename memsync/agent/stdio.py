"""The MCP server's stdio transport: every line the client sends is answered, one that holds no
message with a JSON-RPC error, where the SDK's own transport answered none."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
from typing import Any, BinaryIO, TextIO, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

log = logging.getLogger("memsync.mcp")


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


async def _serve_stdio(app: MCPServer, streams: Any) -> None:
    """MCPServer.run("stdio"), except that memsync reads the lines itself so that every line gets
    an answer: one that holds no message the server can take gets a JSON-RPC error. `streams`
    holds the command's stdin and stdout: this process's (which the SDK claims, its descriptor
    diverted to stderr while it serves), or a relayed client's, written to as they are."""
    lowlevel = app._lowlevel_server  # the SDK's own run_stdio_async does the same
    lines = anyio.wrap_file(cast(TextIO, _StdinLines(streams.stdin.buffer)))  # it reads lines only
    no_lines = anyio.wrap_file(io.StringIO())  # the transport's own reader is left without any
    stdout = None
    if streams.stdout is not sys.stdout:
        stdout = anyio.wrap_file(cast(TextIO, _Unowned(streams.stdout.buffer, encoding="utf-8")))
    async with stdio_server(stdin=no_lines, stdout=stdout) as (unread, write_stream):
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


def run(app: MCPServer, streams: Any = sys) -> None:
    """`app` on the command's stdin and stdout, until the client closes stdin."""
    anyio.run(_serve_stdio, app, streams)


class _Unowned(io.TextIOWrapper):
    """UTF-8 text over a client's stdout that this server does not own: closing it (or its
    collection) leaves the stream open."""

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.flush()
