"""What the MCP server (mcp_server) stands on: the tools' result shapes, the index connections it lends its calls, and the stdio transport that answers every line."""
