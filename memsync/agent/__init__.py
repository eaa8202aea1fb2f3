"""The MCP face: the server and its tools (server), the tools' result shapes, the index connections it lends its calls, and the stdio transport that answers every line."""
