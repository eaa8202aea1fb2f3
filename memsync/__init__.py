"""memsync: a fresh, offline, searchable index of a Markdown vault."""

# pyproject.toml's version, written here too: importlib.metadata would cost every command its
# import (tests/agent/test_mcp_resources.py checks that the two agree)
__version__ = "0.1.0"
