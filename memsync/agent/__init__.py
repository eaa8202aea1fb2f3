"""What the MCP server (mcp_server) stands on: the tools' result shapes and the tree listing an agent's context holds."""
