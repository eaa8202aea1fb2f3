"""The HTTP face of `memsync serve`: the Starlette app (the JSON API, MCP over streamable HTTP, the
search page), the guard in front of it, its tokens and sessions, and where it listens."""
