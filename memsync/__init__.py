"""memsync: a fresh, offline, searchable index of a Markdown vault."""

__version__ = "0.1.0"
