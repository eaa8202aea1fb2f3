"""`memsync serve`: the index over HTTP for people (a search page) and programs (a JSON API and
MCP), behind tokens; and its tokens."""
